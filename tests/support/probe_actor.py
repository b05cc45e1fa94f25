"""A minimal actor for runtime tests: it takes execution requests and reports them done.

Consumes `ExecutionRequest` from the executor's durable consumer; for a job `["sleep", S]`
it holds the message S seconds (so a test can kill it mid-job); for `["crash"]` it kills
its own process; for `["verdict"]` it tries to publish a verdict (which its role may not)
and reports what the bus said; otherwise it publishes
`ExecutionDone` with the request id as the message id. It runs nothing: the runtime, not
sandboxing, is under test here.
"""

from __future__ import annotations

import os
import time

import anyio
from anyio.abc import TaskStatus

from bus import subjects
from bus.consumer import Delivery, consume
from bus.errors import PermissionDenied
from bus.messages import ExecutionDone, ExecutionRequest, ExecutionResult, Verdict
from bus.nats_bus import Bus
from runtime.config import RunConfig


async def run(bus: Bus, config: RunConfig, *,
              task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    async def handle(req: ExecutionRequest, delivery: Delivery) -> None:
        if req.job.command[:1] == ["sleep"]:
            await anyio.sleep(float(req.job.command[1]))  # staging: a job that runs this long
        if req.job.command[:1] == ["crash"]:  # a poison message: the process dies every time
            os.kill(os.getpid(), 9)
        # Who ran it, and on which delivery: tests use this to see redelivery happen.
        note = f"pid={os.getpid()} deliveries={delivery.deliveries}"
        if req.job.command[:1] == ["verdict"]:
            note += " " + await try_publishing_a_verdict(bus, req)
        done = ExecutionDone(request=req, result=ExecutionResult(status="ok", exit_code=0,
                                                                 stdout=note),
                             executor=bus.identity.instance, finished_at=time.time())
        await bus.publish(subjects.EXEC_DONE, done, msg_id=req.request_id)

    await consume(bus, subjects.CONSUMER_EXEC, ExecutionRequest, handle, max_in_flight=4,
                  drain_s=config.supervisor.drain_s, task_status=task_status)


async def try_publishing_a_verdict(bus, req: ExecutionRequest) -> str:
    verdict = Verdict(verdict_id=req.attempt.attempt_id, attempt=req.attempt, outcome="pass",
                      reward=1.0)
    try:
        await bus.publish(subjects.verdict_subject("train"), verdict, msg_id=req.request_id)
    except PermissionDenied as exc:
        return f"refused: {exc}"
    return "published"
