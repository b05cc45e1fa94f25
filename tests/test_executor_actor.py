"""The executor actor over a real bus, in a real `whet up` stack: requests in, results out,
a killed executor's work redelivered, avoid_executors honoured without stalling."""

from __future__ import annotations

import os
import signal
import time

import anyio
import pytest

from actors.executor import should_give_back
from bus import subjects
from bus.codec import decode
from bus.messages import (Attempt, ExecutionDone, ExecutionRequest, Heartbeat, Job, Limits, Task,
                          Verifier)
from tests.conftest import backlog, until
from tests.support.sandbox_fixtures import built_envs  # noqa: F401

# make_stack sets [bus] ack_wait_s = 3 s, so a killed executor's work comes back quickly.
STACK = """
[actors.count]
executor = 1
[executor]
concurrency = 2
avoid_delay_s = 0.2
[executor.sandbox]
backend = "local"
"""


def request(request_id: str, command: list[str], **kw) -> ExecutionRequest:
    task = Task(task_id="t/1", env="t", env_version="1", domain="python", prompt="p",
                verifier=Verifier(kind="python_io"))
    attempt = Attempt(attempt_id="g.0", group_id="g", index=0, group_size=1, task=task,
                      turns=[], policy_version=0)
    return ExecutionRequest(request_id=request_id, attempt=attempt,
                            job=Job(command=command, limits=Limits(timeout_s=20, cpu_s=20)), **kw)


async def collect(bus, count: int, timeout_s: float) -> dict[str, ExecutionDone]:
    """Read ExecutionDone messages as the judge would, until `count` distinct ids or timeout."""
    await bus.ensure_consumer(subjects.CONSUMER_EXEC_DONE)
    sub = await bus.js.pull_subscribe_bind(durable=subjects.CONSUMER_EXEC_DONE.durable,
                                           stream=subjects.CONSUMER_EXEC_DONE.stream)
    seen: dict[str, ExecutionDone] = {}
    copies = 0
    with anyio.move_on_after(timeout_s):
        while len(seen) < count:
            try:
                msgs = await sub.fetch(10, timeout=1.0)
            except Exception:  # noqa: BLE001 - nats raises its own timeout type
                continue
            for msg in msgs:
                done = decode(msg.data, ExecutionDone)
                copies += 1
                seen[done.request.request_id] = done
                await msg.ack()
    await sub.unsubscribe()
    assert copies == len(seen), "a request produced more than one stored result"
    return seen


async def executor_pid(bus, timeout_s: float = 30.0) -> tuple[str, int]:
    ready: list[Heartbeat] = []

    async def one_ready() -> bool:
        beats = await bus.kv_items(subjects.BUCKET_ACTORS, Heartbeat, prefix="executor.")
        ready[:] = [b for b in beats.values() if b.state == "ready"]
        return bool(ready)

    await until(one_ready, timeout_s, "an executor's heartbeat saying ready")
    return ready[0].instance, ready[0].pid


@pytest.mark.unit
def test_should_give_back_is_bounded():
    """An avoided instance gives a request back only for its first `limit` deliveries."""
    req = request("r", ["true"], avoid_executors=["executor-0"])
    assert should_give_back(req, "executor-0", 1, 3) and should_give_back(req, "executor-0", 3, 3)
    assert not should_give_back(req, "executor-0", 4, 3)
    assert not should_give_back(req, "executor-1", 1, 3)


@pytest.mark.stack
@pytest.mark.timeout(180)
async def test_requests_in_results_out(bus, make_stack, built_envs):
    """Each request yields one ExecutionDone with the sandbox's result, keyed by request id."""
    stack = make_stack(STACK)
    stack.start()
    reqs = [request(f"a.{i}/t0/r0", ["python3", "-c", f"print({i} * 2)"]) for i in range(4)]
    reqs.append(request("bad/t0/r0", ["python3", "-c", "import sys; sys.exit(4)"]))
    for req in reqs:
        await bus.publish(subjects.EXEC_REQUESTS, req, msg_id=req.request_id)
    done = await collect(bus, len(reqs), timeout_s=60)
    assert sorted(done) == sorted(r.request_id for r in reqs)
    for i in range(4):
        result = done[f"a.{i}/t0/r0"].result
        assert (result.status, result.stdout.strip(), result.backend) == ("ok", str(i * 2), "local")
    assert done["bad/t0/r0"].result.exit_code == 4
    assert done["bad/t0/r0"].executor.startswith("executor")


@pytest.mark.stack
@pytest.mark.timeout(180)
async def test_killed_executor_work_is_redelivered(bus, make_stack, built_envs):
    """kill -9 of the executor mid-job: the restarted one runs the request; one result only."""
    stack = make_stack(STACK)
    stack.start()
    _, pid = await executor_pid(bus)
    # staging: a job that runs 3 s, so the kill lands mid-job
    req = request("slow/t0/r0", ["python3", "-c", "import time; time.sleep(3); print('slept')"])
    await bus.publish(subjects.EXEC_REQUESTS, req, msg_id=req.request_id)

    async def taken() -> bool:  # the executor holds the request: its job is starting
        return await backlog(bus, subjects.CONSUMER_EXEC) == (0, 1)

    await until(taken)
    os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    done = await collect(bus, 1, timeout_s=60)
    result = done["slow/t0/r0"].result
    assert (result.status, result.stdout.strip()) == ("ok", "slept"), result
    assert time.monotonic() - started >= 2.0  # it ran again, after the redelivery
    _, new_pid = await executor_pid(bus)
    assert new_pid != pid


@pytest.mark.stack
@pytest.mark.timeout(180)
async def test_avoided_executor_still_runs_it_when_alone(bus, make_stack, built_envs):
    """A request naming the only executor in avoid_executors is still run (after give-backs)."""
    stack = make_stack(STACK)
    stack.start()
    instance, _ = await executor_pid(bus)
    req = request("avoid/t0/r1", ["python3", "-c", "print('ran')"], retry=1,
                  avoid_executors=[instance])
    await bus.publish(subjects.EXEC_REQUESTS, req, msg_id=req.request_id)
    done = await collect(bus, 1, timeout_s=60)
    assert done["avoid/t0/r1"].result.stdout.strip() == "ran"
    assert done["avoid/t0/r1"].executor == instance
