"""The runtime with real processes: crashes, a killed server, scaling, tail, status, down.

Each test runs `whet up` as a separate process against its own nats-server, with the probe
actor (tests/support/probe_actor.py), and drives it through the `whet` CLI and the bus.
"""

from __future__ import annotations

import json
import os
import signal

import msgspec
import pytest

from bus import subjects
from bus.codec import decode
from bus.messages import DeadLetter, ExecutionDone, ExecutionRequest, Job
from runtime.cli import stack_status as status_mod
from tests.conftest import until
from tests.test_codec import samples

pytestmark = pytest.mark.stack

PROBE = """
[actors.count]
probe = {n}
[actors.target]
probe = "tests.support.probe_actor:run"
[supervisor]
heartbeat_s = 0.5
drain_s = 3
restart_backoff_s = 0.2
"""
TEMPLATE = next(s for s in samples() if isinstance(s, ExecutionRequest))


def request(i: int, sleep_s: float) -> ExecutionRequest:
    return msgspec.structs.replace(TEMPLATE, request_id=f"r{i}",
                                   job=Job(command=["sleep", str(sleep_s)]))


async def publish_requests(bus, n: int, sleep_s: float, start: int = 0) -> None:
    await bus.publish_many(subjects.EXEC_REQUESTS,
                           [(f"r{i}", request(i, sleep_s)) for i in range(start, start + n)])


async def done_messages(bus) -> list[ExecutionDone]:
    return [msg for _, msg in await bus.snapshot(subjects.STREAM_EXEC_DONE, ExecutionDone)]


async def wait_for(predicate, timeout_s: float, what: str):
    """The first true value of the async `predicate()`, within `timeout_s`."""
    value = None

    async def holds():
        nonlocal value
        value = await predicate()
        return value

    await until(holds, timeout_s, what)
    return value


async def ready_probes(bus, n: int, timeout_s: float = 30.0) -> status_mod.StackStatus:
    async def check():
        snap = await status_mod.gather(bus)
        return snap if snap.live("probe") == n else None

    return await wait_for(check, timeout_s, f"{n} probes ready")


async def all_done(bus, n: int, timeout_s: float) -> list[ExecutionDone]:
    async def check():
        done = await done_messages(bus)
        return done if len(done) >= n else None

    return await wait_for(check, timeout_s, f"{n} done")


async def test_killed_actor_work_is_redelivered_and_done_once(bus, make_stack):
    """kill -9 of an actor holding unacked work: another instance does it; one result each."""
    stack = make_stack(PROBE.format(n=2))
    stack.start()
    await ready_probes(bus, 2)
    await publish_requests(bus, 6, sleep_s=2.0)

    async def busy_probe():
        snap = await status_mod.gather(bus)
        return next((a for a in snap.actors if a.kind == "probe" and a.in_flight > 0), None)

    victim = await wait_for(busy_probe, 10, "a probe holding work")
    os.kill(victim.pid, signal.SIGKILL)
    done = await all_done(bus, 6, timeout_s=40)
    assert sorted(d.request.request_id for d in done) == [f"r{i}" for i in range(6)]
    (state,) = await bus.stream_states([subjects.STREAM_EXEC_DONE])
    assert state.messages == 6, "downstream saw each request exactly once"
    redone = [d for d in done if "deliveries=1" not in d.result.stdout]
    assert redone, "the killed actor's work came back on a later delivery"
    assert all(f"pid={victim.pid} " not in d.result.stdout for d in redone)
    await ready_probes(bus, 2)  # the killed slot was restarted


async def test_server_crash_loses_nothing_and_actors_reconnect(bus, make_stack, nats_server):
    """kill -9 of nats-server mid-run, restart on the same store: all done once, actors back."""
    stack = make_stack(PROBE.format(n=2))
    stack.start()
    await ready_probes(bus, 2)
    await publish_requests(bus, 40, sleep_s=0.3)
    await all_done(bus, 1, timeout_s=30)  # mid-run: work is being done
    nats_server.kill()

    async def gone() -> bool:
        return not bus.nc.is_connected

    await wait_for(gone, 10, "the test's client to see the server go")
    nats_server.start()
    done = await all_done(bus, 40, timeout_s=90)
    assert sorted(d.request.request_id for d in done) == sorted(f"r{i}" for i in range(40))
    (state,) = await bus.stream_states([subjects.STREAM_EXEC_DONE])
    assert state.messages == 40
    (exec_state,) = await bus.stream_states([subjects.STREAM_EXEC])
    assert exec_state.messages == 0
    snap = await ready_probes(bus, 2)
    assert all(a.beat_age_s < 3 for a in snap.actors), "actors reconnected and beat again"


async def test_scale_up_and_down_while_work_flows(bus, make_stack):
    """whet scale adds instances that take work within seconds; scaling down loses nothing."""
    stack = make_stack(PROBE.format(n=1))
    stack.start()
    await ready_probes(bus, 1)
    await publish_requests(bus, 60, sleep_s=0.5)
    up = stack.whet("scale", "probe=3")
    assert up.returncode == 0, up.stderr
    assert "running probe=3" in up.stdout

    async def new_instances_working():
        executors = {d.executor for d in await done_messages(bus)}
        return {"probe-2", "probe-3"} <= executors

    await wait_for(new_instances_working, 10, "new instances taking work")
    down = stack.whet("scale", "probe=1")
    assert down.returncode == 0, down.stderr
    await publish_requests(bus, 10, sleep_s=0.1, start=60)
    done = await all_done(bus, 70, timeout_s=60)
    assert sorted(d.request.request_id for d in done) == sorted(f"r{i}" for i in range(70))
    (state,) = await bus.stream_states([subjects.STREAM_EXEC_DONE])
    assert state.messages == 70
    snap = await status_mod.gather(bus)
    assert snap.live("probe") == 1


async def test_tail_filters_events_and_shows_dead_letters(bus, make_stack):
    """whet tail shows a dead-lettered payload with its reason, and filters by event, actor, level."""
    stack = make_stack(PROBE.format(n=1))
    stack.start()
    await ready_probes(bus, 1)
    await bus.nc.publish(subjects.EXEC_REQUESTS, b"\x93\x01\x02")

    def tail(*args):
        r = stack.whet("tail", "--no-follow", "--json", "--since", "5m", *args)
        assert r.returncode == 0, r.stderr
        return [json.loads(line) for line in r.stdout.splitlines()]

    async def dead_lettered():
        return tail("--event", "message.dead_lettered")

    (event,) = await wait_for(dead_lettered, 10, "dead-letter event")
    assert event["fields"]["reason"] == "malformed" and event["actor"] == "probe"
    assert "whet.exec_request.v1" in event["fields"]["error"]
    supervisor = tail("--actor", "supervisor")
    assert supervisor and all(e["actor"] == "supervisor" for e in supervisor)
    assert "actor.spawned" in {e["event"] for e in supervisor}
    errors = tail("--level", "error")
    assert errors and all(e["level"] in ("error", "critical") for e in errors)
    globbed = tail("--event", "actor.*")
    assert globbed and all(e["event"].startswith("actor.") for e in globbed)


async def test_status_shows_a_hung_actor_as_dead(bus, make_stack):
    """An actor that stops beating (SIGSTOP) is shown dead, and ready again once it resumes."""
    stack = make_stack(PROBE.format(n=2))
    stack.start()
    snap = await ready_probes(bus, 2)
    victim = snap.actors[0]
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        async def shown_dead():
            r = stack.whet("status", "--json")
            rows = json.loads(r.stdout)["actors"]
            return next((a for a in rows if a["instance"] == victim.instance
                         and a["state"] == "dead"), None)

        await wait_for(shown_dead, 10, "shown dead")
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    await ready_probes(bus, 2)


async def test_down_is_graceful_and_nothing_in_flight_is_lost(bus, make_stack):
    """whet down while work is in flight; a later stack finishes the rest, each exactly once."""
    stack = make_stack(PROBE.format(n=2))
    stack.start()
    await ready_probes(bus, 2)
    # 30 jobs of 3 s on 8 slots take about 12 s, so the stop always lands mid-run, however
    # slowly the loaded machine starts the 'whet down' process.
    await publish_requests(bus, 30, sleep_s=3.0)

    async def in_flight() -> bool:
        (state,) = await bus.stream_states([subjects.STREAM_EXEC])
        return state.consumers[subjects.CONSUMER_EXEC.durable]["in_flight"] > 0

    await wait_for(in_flight, 30, "probes holding work")
    stack.stop()
    first = await done_messages(bus)
    assert len(first) < 30
    (left,) = await bus.stream_states([subjects.STREAM_EXEC])
    assert len(first) + left.messages == 30, "every request is done or still queued"
    again = make_stack(PROBE.format(n=2))
    again.start()
    done = await all_done(bus, 30, timeout_s=60)
    assert sorted(d.request.request_id for d in done) == sorted(f"r{i}" for i in range(30))


async def test_message_that_crashes_its_actor_every_time_is_dead_lettered(bus, make_stack):
    """A poison message that kills each process handling it ends in the dead-letter stream
    with reason max_deliveries, and the actors keep serving other work."""
    stack = make_stack(PROBE.format(n=1), bus_text="ack_wait_s = 1.0\nmax_deliver = 3")
    stack.start()
    await ready_probes(bus, 1)
    poison = msgspec.structs.replace(TEMPLATE, request_id="poison", job=Job(command=["crash"]))
    await bus.publish(subjects.EXEC_REQUESTS, poison, msg_id="poison")

    async def dead_lettered():
        letters = [m for _, m in await bus.snapshot(subjects.STREAM_DLQ, DeadLetter)]
        return letters or None

    (letter,) = await wait_for(dead_lettered, 60, "poison dead-lettered")
    assert letter.reason == "max_deliveries" and letter.deliveries == 3
    assert decode(letter.payload, ExecutionRequest).request_id == "poison"
    await publish_requests(bus, 3, sleep_s=0.1)
    done = await all_done(bus, 3, timeout_s=30)
    assert sorted(d.request.request_id for d in done) == ["r0", "r1", "r2"]
