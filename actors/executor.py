"""The executor actor: runs execution requests in sandboxes and reports what happened.

Consumes `ExecutionRequest` from the durable `executor` consumer of WHET_EXEC
(`subjects.CONSUMER_EXEC`), at most `[executor] concurrency` at once; publishes one
`ExecutionDone` per request on `subjects.EXEC_DONE` with msg id = `request_id`, so a
redelivered request never stores a second result. A backend bug answers the request with a
`sandbox_error` result (`sandbox.runner.run_job`), which the judge retries elsewhere. Also
answers tool episodes' `SessionRequest`s over core request/reply (`run`).
It does NOT judge, retry or interpret results: the judge does.
"""

from __future__ import annotations

import time
from functools import partial

import anyio
import structlog
from anyio.abc import TaskStatus

from bus import gauges, subjects
from bus.consumer import Delivery, consume
from bus.gauges import RecentRate
from bus.messages import ExecutionDone, ExecutionRequest, SessionReply, SessionRequest
from runtime.config import RunConfig
from sandbox.runner import run_job
from sandbox.sessions import SessionHost
from sandbox.workspace import WorkspaceCache
from bus.nats_bus import Bus

log = structlog.get_logger("actors.executor")


def should_give_back(request: ExecutionRequest, instance: str, deliveries: int, limit: int) -> bool:
    """True when this instance should let another executor take `request`: it is named in
    `avoid_executors` (its sandbox failed this turn) and the request was delivered at most
    `limit` (`avoid_naks`) times; after that it runs it anyway, so a stack with one executor
    still makes progress."""
    return instance in request.avoid_executors and deliveries <= limit


async def run(bus: Bus, config: RunConfig, *,
              task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """The executor actor: run requests until the bus stops, then close every session and the
    backend. Sessions: `SESSION_OPEN` in the `executors` queue group, then
    `session_subject(instance)`; each episode's workspace (`sandbox.sessions`) is held until the
    judge closes it, it idles out, or this process stops (a session dies with its process, and
    the judge then drops the attempt)."""
    cfg: ExecutorConfig = config.executor
    instance = bus.identity.instance
    from sandbox import Metered, open_backend

    backend = Metered(await open_backend(cfg.sandbox, slots=cfg.concurrency,
                                         run_id=f"{bus.identity.run_id}.{instance}"))

    finished = RecentRate()

    async def handle(request: ExecutionRequest, delivery: Delivery) -> None:
        if should_give_back(request, instance, delivery.deliveries, cfg.avoid_naks):
            log.info("exec.given_back", request_id=request.request_id, deliveries=delivery.deliveries)
            await delivery.nak(delay_s=cfg.avoid_delay_s)
            return
        result = await run_job(backend, request.job)
        bus.stats.gauges[gauges.SANDBOX_CPU_S] = round(backend.cpu_s, 3)
        done = ExecutionDone(request=request, result=result, executor=instance,
                             finished_at=time.time())
        await bus.publish(subjects.EXEC_DONE, done, msg_id=request.request_id)
        bus.stats.gauges[gauges.EXECUTOR_JOBS_PER_S] = finished.tick()
        log.info("exec.completed", request_id=request.request_id, status=result.status,
                 wall_s=round(result.wall_s, 3), cpu_s=round(result.cpu_s, 3),
                 sandbox_failed=result.sandbox_failed, backend=result.backend)

    cache = WorkspaceCache(cfg.sandbox.workdir_root or None, enabled=cfg.cache_workspaces)
    host = SessionHost(backend, cache, instance, cfg.session_idle_s)

    async def handle_session(request: SessionRequest) -> SessionReply:
        reply = await host.handle(request)
        bus.stats.gauges.update({f"executor.sessions.{k}": float(v) for k, v in host.counts.items()})
        bus.stats.gauges["executor.sessions.open"] = float(len(host.sessions))
        bus.stats.gauges.update({f"executor.workspace.{k}": round(float(v), 4)
                                 for k, v in cache.stats.items()})
        return reply

    async def reap_idle() -> None:
        while True:
            await anyio.sleep(min(cfg.session_idle_s / 4, 30.0))
            host.reap_idle()

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(partial(bus.serve, subjects.SESSION_OPEN, SessionRequest, handle_session,
                                   queue=subjects.SESSION_QUEUE, limit=cfg.concurrency))
            await tg.start(partial(bus.serve, subjects.session_subject(instance), SessionRequest,
                                   handle_session, limit=cfg.concurrency * 4))
            tg.start_soon(reap_idle)
            await consume(bus, subjects.CONSUMER_EXEC, ExecutionRequest, handle,
                          max_in_flight=cfg.concurrency, drain_s=config.supervisor.drain_s,
                          task_status=task_status)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            host.close_all()
            await backend.aclose()
