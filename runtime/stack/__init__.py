"""The stack: what `whet up` runs on one machine, and the actor process it starts.

Consumes a `RunConfig` and a run directory; produces the broker (`runtime.broker`), one
supervised OS process per actor (`runtime.stack.actor`), restarts with backoff, autoscaled
counts, the live line, progress and eval CSVs and plots. It holds no domain logic: what
an actor does is its own module's (`actors/`), named by `runtime.kinds`.
"""
