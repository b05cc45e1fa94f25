"""Judging: turn an attempt and what running it produced into layered, attributed rewards.

Consumes `Task`, `Attempt` and `ExecutionResult` values; produces sandbox `Job`s, layer
results, failure causes with evidence, hack flags and composite rewards. Pure functions and
small classes: no bus, no actor loop (that is `actors.judge`), no sandboxing (`sandbox`).
"""
