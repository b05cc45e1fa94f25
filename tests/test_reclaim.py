"""A full verdict stream against a real nats-server: room is made only from verdicts every
reader has acked, and a publish that finds the stream full uses that room."""

from __future__ import annotations

import msgspec
import pytest

from bus import subjects
from bus.errors import BusUnavailable
from bus.messages import Verdict
from bus.nats_bus import Bus, Identity
from runtime.config import RunConfig
from runtime.connect import topology
from tests.conftest import bus_settings, until, with_caps
from tests.test_codec import samples

pytestmark = pytest.mark.bus

VERDICT = next(s for s in samples() if type(s) is Verdict)
READERS = (subjects.CONSUMER_LEARNER, subjects.CONSUMER_MONITOR_EVAL)


def verdict(i: int) -> Verdict:
    """About 127 KB: eight fit a 1 MiB stream, a ninth does not."""
    return msgspec.structs.replace(VERDICT, verdict_id=f"v{i}", evidence="x" * 127_000)


@pytest.fixture
async def small(nats_server):
    cfg = with_caps(RunConfig(), work_max_mb=8, verdicts_max_mb=1, events_max_mb=8)
    b = await Bus.connect(bus_settings(nats_server.url, publish_deadline_s=1.5),
                          Identity("test", "test-1"))
    await b.ensure_topology(topology(cfg))
    for spec in READERS:
        await b.ensure_consumer(spec)
    yield b
    await b.close()


async def take(bus, spec, n: int) -> list[str]:
    """Fetch and ack `n` messages as the durable `spec`; returns their verdict ids."""
    sub = await bus.js.pull_subscribe_bind(spec.durable, spec.stream)
    msgs = await sub.fetch(n, timeout=5)
    for m in msgs:
        await m.ack_sync()
    return [m.headers["Nats-Msg-Id"] for m in msgs]


async def publish(bus, purpose: str, i: int) -> None:
    await bus.publish(subjects.verdict_subject(purpose), verdict(i), msg_id=f"v{i}",
                      when_full=lambda: bus.reclaim_consumed(subjects.STREAM_VERDICTS))


async def test_full_verdict_stream_frees_only_what_every_reader_acked(small):
    bus = small
    await publish(bus, "train", 1)
    await publish(bus, "eval", 2)
    for i in range(3, 9):
        await publish(bus, "train", i)
    [state] = await bus.stream_states([subjects.STREAM_VERDICTS])
    assert state.messages == 8

    # The learner acked four; the monitor holds the eval verdict unacked: nothing may go.
    assert await take(bus, subjects.CONSUMER_LEARNER, 4) == ["v1", "v3", "v4", "v5"]
    with pytest.raises(BusUnavailable):
        await publish(bus, "train", 9)
    [state] = await bus.stream_states([subjects.STREAM_VERDICTS])
    assert state.messages == 8

    # Once the monitor has acked too, the four verdicts both have handled make room; those
    # the learner has not read stay and reach it, followed by the new one.
    assert await take(bus, subjects.CONSUMER_MONITOR_EVAL, 1) == ["v2"]
    await publish(bus, "train", 9)
    [state] = await bus.stream_states([subjects.STREAM_VERDICTS])
    assert state.messages == 4
    assert await take(bus, subjects.CONSUMER_LEARNER, 10) == ["v6", "v7", "v8", "v9"]


async def test_reclaim_removes_nothing_without_readers(small):
    for spec in READERS:
        await small.js.delete_consumer(spec.stream, spec.durable)
    await publish(small, "train", 1)
    assert await small.reclaim_consumed(subjects.STREAM_VERDICTS) == 0
    [state] = await small.stream_states([subjects.STREAM_VERDICTS])
    assert state.messages == 1


async def test_a_verdict_the_server_gave_up_on_stays_until_it_is_dead_lettered(small):
    """Once a message hits max_deliver the consumer no longer holds it, but its dead letter
    is copied from the stream when the server's advisory is handled: until then it stays."""
    bus = small
    for spec in READERS:
        await bus.js.delete_consumer(spec.stream, spec.durable)
    await bus.ensure_consumer(subjects.CONSUMER_LEARNER, ack_wait_s=1.0, max_deliver=1)
    await publish(bus, "train", 1)
    sub = await bus.js.pull_subscribe_bind(subjects.CONSUMER_LEARNER.durable,
                                           subjects.STREAM_VERDICTS)
    assert len(await sub.fetch(1, timeout=5)) == 1  # never acked
    advisories = subjects.max_deliveries_advisory(subjects.STREAM_VERDICTS, "*")
    async def advised() -> bool:
        return bool((await bus.js.stream_info(subjects.STREAM_ADVISORIES,
                                              subjects_filter=advisories)).state.subjects)

    await until(advised, 15, "a max-deliveries advisory for the verdicts stream")
    assert await bus.reclaim_consumed(subjects.STREAM_VERDICTS) == 0
    [state] = await bus.stream_states([subjects.STREAM_VERDICTS])
    assert state.messages == 1
    await bus.js.purge_stream(subjects.STREAM_ADVISORIES)  # as if dead-lettered
    assert await bus.reclaim_consumed(subjects.STREAM_VERDICTS) == 1
