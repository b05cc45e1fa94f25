"""The bus against a real nats-server: durable publish, de-duplication, dead letters,
backpressure, KV and the weights object store."""

from __future__ import annotations

import os
from functools import partial

import anyio
import msgpack
import pytest

from bus import subjects
from bus.consumer import consume
from bus.errors import BusError, ObjectCorrupt
from bus.messages import DeadLetter, ScaleTarget, WeightVersion
from bus.nats_bus import Bus, Identity
from bus.objects import delete_object, get_object, list_objects, put_object
from runtime.broker.embedded import EmbeddedServer
from runtime.config import RunConfig
from runtime.connect import topology
from tests.conftest import bus_settings, until, with_caps
from tests.test_codec import samples

ASSIGNMENT = next(s for s in samples() if type(s).__name__ == "TaskAssignment")


def assignment(i: int):
    import msgspec

    return msgspec.structs.replace(ASSIGNMENT, assignment_id=f"a{i}")


async def dead_letters(bus) -> list[DeadLetter]:
    out = []
    async for _, letter, _ in bus.replay(subjects.STREAM_DLQ, f"{subjects.DEAD_LETTERS}.>",
                                         DeadLetter, follow=False):
        out.append(letter)
    return out


async def stored(bus, stream: str) -> int:
    (state,) = await bus.stream_states([stream])
    return state.messages


async def serve_until(bus, handler, done, *, timeout_s: float = 20.0, **kwargs) -> None:
    """Serve the tasks consumer with `handler` until `done()` is true, then stop."""
    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, subjects.CONSUMER_TASKS, type(ASSIGNMENT), handler,
                               **kwargs))
        await until(done, timeout_s)
        bus.stopping.set()


@pytest.mark.bus
async def test_retried_publish_is_stored_once(bus):
    """Publishing the same msg id twice stores one message; the second ack says duplicate."""
    assert await bus.publish(subjects.TASKS, assignment(1), msg_id="a1") is False
    assert await bus.publish(subjects.TASKS, assignment(1), msg_id="a1") is True
    (state,) = await bus.stream_states([subjects.STREAM_TASKS])
    assert state.messages == 1


@pytest.mark.bus
async def test_publish_many_stores_all_and_counts_new(bus):
    """Pipelined publishing stores every message once."""
    items = [(f"a{i}", assignment(i)) for i in range(50)]
    assert await bus.publish_many(subjects.TASKS, items) == 50
    assert await bus.publish_many(subjects.TASKS, items[:10]) == 0
    (state,) = await bus.stream_states([subjects.STREAM_TASKS])
    assert state.messages == 50


@pytest.mark.bus
async def test_bad_payloads_go_to_dead_letter_and_consumer_keeps_serving(bus):
    """Malformed and wrong-version payloads are dead-lettered with reasons; good work flows."""
    await bus.publish(subjects.TASKS, assignment(1), msg_id="a1")
    await bus.nc.publish(subjects.TASKS, b"\xc1 not msgpack")
    await bus.nc.publish(subjects.TASKS, msgpack.packb({"t": "whet.assignment.v9", "x": 1}))
    await bus.publish(subjects.TASKS, assignment(2), msg_id="a2")
    seen = []

    async def handle(msg, delivery):
        seen.append(msg.assignment_id)

    async def settled() -> bool:  # handled or dead-lettered, every one
        return (await stored(bus, subjects.STREAM_TASKS) == 0
                and await stored(bus, subjects.STREAM_DLQ) == 2)

    await serve_until(bus, handle, settled)
    assert seen == ["a1", "a2"]
    letters = await dead_letters(bus)
    assert sorted(l.reason for l in letters) == ["malformed", "schema_mismatch"]
    mismatch = next(l for l in letters if l.reason == "schema_mismatch")
    assert "whet.assignment.v9" in mismatch.error and "whet.assignment.v1" in mismatch.error
    assert mismatch.stream == subjects.STREAM_TASKS and mismatch.subject == subjects.TASKS
    assert msgpack.unpackb(mismatch.payload)["t"] == "whet.assignment.v9"
    (tasks,) = await bus.stream_states([subjects.STREAM_TASKS])
    assert tasks.messages == 0, "everything was settled: processed or dead-lettered"


@pytest.mark.bus
async def test_failing_handler_is_retried_then_dead_lettered(bus):
    """A handler that keeps raising gets max_deliver tries, then the message is dead-lettered."""
    await bus.publish(subjects.TASKS, assignment(1), msg_id="a1")
    tries = []

    async def handle(msg, delivery):
        tries.append(delivery.deliveries)
        raise RuntimeError("boom")

    async def dead_lettered() -> bool:
        return await stored(bus, subjects.STREAM_DLQ) == 1

    await serve_until(bus, handle, dead_lettered, max_deliver=3)
    assert tries == [1, 2, 3]
    (letter,) = await dead_letters(bus)
    assert letter.reason == "handler_error" and "boom" in letter.error
    assert letter.deliveries == 3


@pytest.mark.bus
async def test_in_flight_work_is_bounded(bus):
    """No more than max_in_flight messages are held at once."""
    await bus.publish_many(subjects.TASKS, [(f"a{i}", assignment(i)) for i in range(30)])
    held, peak, done = 0, 0, []

    async def handle(msg, delivery):
        nonlocal held, peak
        held += 1
        peak = max(peak, held)
        await anyio.sleep(0.05)  # staging: each job takes a while, so the slots fill
        held -= 1
        done.append(msg.assignment_id)

    await serve_until(bus, handle, lambda: len(done) == 30, max_in_flight=4)
    assert peak == 4


@pytest.mark.bus
async def test_deferred_deliveries_do_not_stall_fetching(bus):
    """A handler that defers (the learner holds verdicts until a checkpoint) keeps getting
    messages while most of its slots are parked: with 5 of 8 slots parked, the 3 free ones
    are filled, rather than waiting for half the slots to free."""
    await bus.publish_many(subjects.TASKS, [(f"a{i}", assignment(i)) for i in range(20)])
    got = []

    async def park(msg, delivery):
        delivery.defer()
        got.append(delivery)

    async def holding(n: int) -> bool:
        # `n` handed over, 8 held, no pull request outstanding: nothing more can come
        # until a slot frees.
        info = await bus.js.consumer_info(subjects.STREAM_TASKS, subjects.CONSUMER_TASKS.durable)
        return len(got) == n and info.num_ack_pending == 8 and not info.num_waiting

    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, subjects.CONSUMER_TASKS, type(ASSIGNMENT), park,
                               max_in_flight=8, drain_s=0.5))
        await until(lambda: holding(8))
        for delivery in got[:3]:
            await delivery.ack()
        await until(lambda: holding(11))
        received = len(got)
        for delivery in got[3:]:
            await delivery.ack()
        bus.stopping.set()
    assert received == 11  # never more than max_in_flight held


@pytest.mark.bus
async def test_stop_gives_back_unfinished_work(bus):
    """Work still running when the drain time ends is nak'ed and redelivered, not lost."""
    await bus.publish(subjects.TASKS, assignment(1), msg_id="a1")
    started = anyio.Event()

    async def slow(msg, delivery):
        started.set()
        await anyio.sleep(60)  # staging: work that outlasts the drain time

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: consume(bus, subjects.CONSUMER_TASKS, type(ASSIGNMENT), slow,
                                      drain_s=0.5))
        await started.wait()
        bus.stopping.set()
    bus.stopping = anyio.Event()
    again = []

    async def fast(msg, delivery):
        again.append((msg.assignment_id, delivery.deliveries))

    # A sentinel published after the stop: the server sends the nak'ed message before it.
    await bus.publish(subjects.TASKS, assignment(2), msg_id="a2")
    await serve_until(bus, fast, lambda: ("a2", 1) in again)
    assert again == [("a1", 2), ("a2", 1)]


@pytest.mark.bus
async def test_kv_holds_and_watches_values(bus):
    """A KV watch yields the current value, then each update."""
    await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                     WeightVersion(version=1, object_name="v1"))
    seen = []
    with anyio.move_on_after(5):
        async for value in bus.kv_watch(subjects.BUCKET_POLICY, subjects.KEY_POLICY, WeightVersion):
            seen.append(value.version)
            if value.version == 1:
                await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                                 WeightVersion(version=2, object_name="v2"))
            if value.version == 2:
                break
    assert seen == [1, 2]
    targets = {"scale.a": ScaleTarget(kind="a", count=1), "scale.b": ScaleTarget(kind="b", count=2)}
    for key, target in targets.items():
        await bus.kv_put(subjects.BUCKET_RUN, key, target)
    assert await bus.kv_items(subjects.BUCKET_RUN, ScaleTarget, prefix="scale.") == targets


@pytest.mark.bus
async def test_consume_reports_started_once_its_consumer_exists(bus):
    """`await tg.start(consume, ...)` returns with the durable consumer on the server, so a
    message published right after is delivered to it."""
    seen = []

    async def handle(msg, delivery):
        seen.append(msg.assignment_id)

    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, subjects.CONSUMER_TASKS, type(ASSIGNMENT), handle))
        info = await bus.js.consumer_info(subjects.STREAM_TASKS, subjects.CONSUMER_TASKS.durable)
        assert info.config.durable_name == subjects.CONSUMER_TASKS.durable
        await bus.publish(subjects.TASKS, assignment(1), msg_id="a1")
        await until(lambda: seen == ["a1"])
        bus.stopping.set()


@pytest.mark.bus
async def test_kv_watch_rides_through_a_server_restart(bus, nats_server):
    """A KV watch (monitor, sampler, generators) is renewed after a kill -9 and restart of
    the server: a value put afterwards still reaches it."""
    seen: list[int] = []

    async def watch() -> None:
        async for value in bus.kv_watch(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                                        WeightVersion):
            seen.append(value.version)

    await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                     WeightVersion(version=1, object_name="v1"))
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await until(lambda: seen == [1])
            nats_server.kill()
            await until(lambda: not bus.nc.is_connected)
            await anyio.to_thread.run_sync(nats_server.start)
            await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                             WeightVersion(version=2, object_name="v2"))
            await until(lambda: 2 in seen, timeout_s=30)
            tg.cancel_scope.cancel()
    assert set(seen) == {1, 2} and seen[-1] == 2  # a renewed watch may repeat a value


@pytest.mark.bus
async def test_weights_object_round_trips_with_checksum(bus):
    """A multi-chunk object reads back byte-identical; a replaced one frees the old chunks."""
    data = os.urandom(5 * 1024 * 1024 + 123)
    stored = await put_object(bus, subjects.BUCKET_WEIGHTS, "v1", data)
    assert stored.chunks >= 5 and stored.size == len(data)
    assert await get_object(bus, subjects.BUCKET_WEIGHTS, "v1") == data
    await put_object(bus, subjects.BUCKET_WEIGHTS, "v1", data[:1000])
    assert await get_object(bus, subjects.BUCKET_WEIGHTS, "v1") == data[:1000]
    (state,) = await bus.stream_states(["OBJ_" + subjects.BUCKET_WEIGHTS])
    assert state.bytes < 1024 * 1024, "the first version's chunks were purged"
    assert await list_objects(bus, subjects.BUCKET_WEIGHTS) == ["v1"]
    await delete_object(bus, subjects.BUCKET_WEIGHTS, "v1")
    assert await list_objects(bus, subjects.BUCKET_WEIGHTS) == []


@pytest.mark.bus
async def test_corrupted_object_is_refused(bus):
    """If stored chunks no longer match the recorded checksum, the read fails loudly."""
    await put_object(bus, subjects.BUCKET_WEIGHTS, "v1", b"a" * 3000)
    stream = "OBJ_" + subjects.BUCKET_WEIGHTS
    info = await bus.js.stream_info(stream)
    chunk_seq = info.state.first_seq
    raw = await bus.js.get_msg(stream, chunk_seq)
    await bus.js.delete_msg(stream, chunk_seq)
    await bus.js.publish(raw.subject, b"b" * 3000)
    with pytest.raises(ObjectCorrupt, match="checksum"):
        await get_object(bus, subjects.BUCKET_WEIGHTS, "v1")


@pytest.mark.bus
async def test_following_replay_rides_through_a_server_restart(bus, nats_server):
    """A following replay (whet tail, progress) keeps reading across a kill -9 and restart of
    the server: every message once, in order."""
    from bus.messages import Event

    def event(n: int) -> Event:
        return Event(ts=float(n), level="info", event=f"e{n}", actor="test", instance="t1")

    async def publish(numbers) -> None:
        for n in numbers:
            await bus.publish(subjects.event_subject("test", "t1", "info"), event(n), msg_id=f"e{n}")

    seen: list[str] = []

    async def follow() -> None:
        async for _, ev, _ in bus.replay(subjects.STREAM_EVENTS, subjects.event_filter("test"), Event):
            seen.append(ev.event)
            if len(seen) == 6:
                return

    await publish(range(1, 4))
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await until(lambda: len(seen) >= 3, 60, "the first 3 events followed")
            nats_server.kill()
            await until(lambda: not bus.nc.is_connected, 60, "the client has seen the server go")
            await anyio.to_thread.run_sync(nats_server.start)
            await publish(range(4, 7))
    assert seen == [f"e{n}" for n in range(1, 7)]


@pytest.mark.bus
async def test_object_put_through_a_server_outage_stores_it_once(bus, nats_server):
    """A put started while the server is down (more than the client buffers) completes once
    it is back: the object reads back whole and the cut-off try leaves no chunks behind."""
    data = os.urandom(5 * 1024 * 1024 + 7)
    nats_server.kill()
    started = anyio.Event()

    async def put() -> None:
        started.set()
        await put_object(bus, subjects.BUCKET_WEIGHTS, "v1", data)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(put)
            await started.wait()  # its first chunks fill the client's buffer at once
            await until(lambda: bus.nc.is_reconnecting)  # the client gave that connection up
            await anyio.to_thread.run_sync(nats_server.start)
    assert await get_object(bus, subjects.BUCKET_WEIGHTS, "v1") == data
    (state,) = await bus.stream_states(["OBJ_" + subjects.BUCKET_WEIGHTS])
    assert state.bytes < len(data) + 64 * 1024, "chunks of the cut-off try were left behind"


@pytest.mark.bus
async def test_stream_caps_past_the_server_store_name_the_config_key(tmp_path):
    """JetStream reserves each stream's cap when it creates the stream: caps larger than the
    server's file store get an error that names the stream and the key to lower, and caps
    that fit create the whole topology on the same server."""
    server = EmbeddedServer(tmp_path / "nats", max_file_store_mb=600)
    server.start()
    try:
        b = await Bus.connect(bus_settings(server.url), Identity("test", "test-1"))
        try:
            big = with_caps(RunConfig(), work_max_mb=700)
            with pytest.raises(BusError) as err:
                await b.ensure_topology(topology(big))
            text = str(err.value)
            assert "[bus] work_max_mb" in text and "WHET_" in text, text
            assert "reserve 700 MB" in text, text
            small = with_caps(big, work_max_mb=16, verdicts_max_mb=64, events_max_mb=16,
                              trials_max_mb=64)
            await b.ensure_topology(topology(small))
            states = await b.stream_states([subjects.STREAM_TASKS, subjects.STREAM_TRIALS])
            assert len(states) == 2
        finally:
            await b.close()
    finally:
        server.kill()


@pytest.mark.unit
def test_default_stream_caps_fit_a_small_disk():
    """The server reserves every cap on its store (75% of free disk by default): the
    defaults together stay within 4 GiB, so a machine with about 5.7 GB free runs them."""
    caps = [s.max_bytes for s in topology(RunConfig()) if s.max_bytes > 0]
    assert sum(caps) <= 4 * 1024**3, sum(caps) / 1024**2


@pytest.mark.bus
async def test_message_near_the_payload_limit_is_dead_lettered_cut_not_redelivered(bus):
    """A payload too large for a letter to carry whole (near the server's limit) is still
    dead-lettered, its first bytes kept with its size and sha256, and leaves its stream; the
    error is one line however long the traceback was."""
    import hashlib

    huge = b"\xc1" + os.urandom(bus.nc.max_payload - 1024)
    await bus.nc.publish(subjects.TASKS, huge)
    await bus.publish(subjects.TASKS, assignment(2), msg_id="a2")
    seen = []

    async def handle(msg, delivery):
        seen.append(msg.assignment_id)

    async def settled() -> bool:
        return (await stored(bus, subjects.STREAM_TASKS) == 0
                and await stored(bus, subjects.STREAM_DLQ) == 1)

    await serve_until(bus, handle, settled)
    (letter,) = await dead_letters(bus)
    assert seen == ["a2"] and letter.reason == "malformed"
    assert letter.payload_bytes == len(huge) > len(letter.payload) > 0
    assert huge.startswith(letter.payload)
    assert letter.payload_sha256 == hashlib.sha256(huge).hexdigest()
    assert "\n" not in letter.error


@pytest.mark.unit
def test_a_long_traceback_becomes_one_short_line():
    """`one_line` folds a multi-line error and cuts it to ERROR_CHARS."""
    from bus.dead_letters import ERROR_CHARS, one_line

    text = one_line("Traceback (most recent call last):\n" + "  +-----\n" * 5000 + "ValueError: x")
    assert "\n" not in text and len(text) == ERROR_CHARS and text.startswith("Traceback")
