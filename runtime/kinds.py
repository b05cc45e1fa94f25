"""The built-in actor kinds: each kind's name and the `module:function` it runs.

Consumed by `runtime.config` (which kinds a config may name) and the actor process (which
`run` to call, imported by name: a kind is loaded only when it is configured). Users add
kinds of their own in config (`[actors] target = {probe = "my.module:run"}`), without
touching this file. It imports nothing: the actors it names sit above it.
"""

KINDS: dict[str, str] = {
    "monitor": "actors.monitor:run",
    "generator": "actors.generator:run",
    "learner": "actors.learner:run",
    "learner_rank": "actors.learner_rank:run",
    "executor": "actors.executor:run",
    "sampler": "actors.sampler:run",
    "evaluator": "actors.evaluator:run",
    "judge": "actors.judge:run",
}
