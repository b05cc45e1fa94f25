"""The actor kinds whetstone ships, one module each.

`KINDS` maps a kind to the `module:function` the supervisor runs in a process of its own.
Every function has the actor contract:

    async def run(bus: Bus, config: RunConfig, *,
                  task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None

It calls `task_status.started()` once it serves: after its consumers, started with
`await tg.start(partial(consume, ...))`, exist on the server. It returns after
`bus.stopping` is set and its in-flight work is finished or given back. Users add kinds of
their own in config (`[actors.target]`), without touching this file.

Actors are where the packages meet the wiring: each takes the composed `RunConfig`
(`runtime.config`) and hands each package its own section. That is the only thing an actor
imports from `runtime/`; the packages themselves (sandbox, policy, judging, envs,
monitoring, bus) import nothing from it (`tests/test_layers.py`).
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
