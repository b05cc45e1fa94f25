"""The actors whetstone ships, one module each (their kind names: `runtime.kinds`).

Every actor's `run` has the contract:

    async def run(bus: Bus, config: RunConfig, *,
                  task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None

It calls `task_status.started()` once it serves: after its consumers, started with
`await tg.start(partial(consume, ...))`, exist on the server. It returns after
`bus.stopping` is set and its in-flight work is finished or given back. An actor takes the
composed `RunConfig` (`runtime.config`), the only thing it imports from `runtime/`, and
hands each package its own section (`tests/test_layers.py`).
"""
