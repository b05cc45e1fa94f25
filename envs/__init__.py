"""Task environments: generators and task files, intake gates, and the curriculum's logic.

An environment is one module (or task file) plus a `[envs.use.<name>]` config entry; see
`envs/README.md` for the standard and how to add one. This package produces `Task` records
and decisions (gate reports, task choices, admission counts); it publishes nothing and runs
code only through the judge's `judging.verify.check_code`. The sampler and evaluator actors
(`actors/`) wire it to the bus.
"""
