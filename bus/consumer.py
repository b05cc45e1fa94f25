"""Pull-consumer loop: bounded in-flight work, explicit acks, dead letters, graceful drain.

Consumes a durable JetStream consumer (`bus.subjects.ConsumerSpec`) and a handler
`async (message, delivery) -> None`; produces acks, naks and `DeadLetter` messages.

- At most `max_in_flight` messages are held at once (backpressure).
- A payload that cannot be decoded goes to the dead-letter subject with the reason, and the
  loop keeps serving. So does a message whose handler keeps failing, on its last delivery,
  and one the server gave up on (the MAX_DELIVERIES advisory) because its handler's process
  died each time.
- A handler that returns normally has its message acked, unless it called `defer()`: then
  the message stays held (and kept alive) until the handler's owner settles it.
- A message is handed to the handler once while this consumer holds it. A redelivery of a
  held message (the server restarted, or its ack timer ran out during an outage) rebinds
  the held `Delivery` to the newest copy, so the holder's eventual ack lands on it, and the
  handler is not called again; another copy with the same message id but another stream
  sequence is acked as a duplicate.
- A message id seen and acked recently is acked again without calling the handler: a late
  ack can land on a redelivery (nats-server issue 4786).
- Once `bus.stopping` is set, no more is fetched; in-flight handlers get `drain_s` to
  finish, then are cancelled and their messages nak'ed for another instance.

It does not decide what work means: that is the handler's job.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict, deque
from typing import Awaitable, Callable, TypeVar

import anyio
import nats.errors
import nats.js.errors
import structlog

from bus import subjects
from bus.codec import decode
from bus.errors import BusUnavailable, WireError
from bus.messages import DeadLetter, Message
from bus.nats_bus import Bus

M = TypeVar("M", bound=Message)
log = structlog.get_logger("bus.consumer")


class RecentIds:
    """A bounded set of recently finished message ids (oldest forgotten first)."""

    def __init__(self, limit: int = 50_000) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._limit = limit

    def add(self, msg_id: str) -> None:
        self._ids[msg_id] = None
        self._ids.move_to_end(msg_id)
        if len(self._ids) > self._limit:
            self._ids.popitem(last=False)

    def __contains__(self, msg_id: str) -> bool:
        return msg_id in self._ids


class Delivery:
    """One delivered message and the means to settle it."""

    def __init__(self, msg: nats.aio.msg.Msg) -> None:
        self.msg = msg
        meta = msg.metadata
        self.stream_seq: int = meta.sequence.stream
        self.deliveries: int = meta.num_delivered
        self.subject: str = msg.subject
        header_id = (msg.headers or {}).get("Nats-Msg-Id")
        self.msg_id: str = header_id or f"{meta.stream}:{self.stream_seq}"
        self.rebound = 0
        "Redeliveries of this message taken over while it was held."
        self.is_settled = False
        self.deferred = False
        self.acked = False
        self._settled_event: anyio.Event | None = None

    def defer(self) -> None:
        """Keep the message held after the handler returns; the caller will settle it."""
        self.deferred = True
        self._settled_event = anyio.Event()

    async def wait_settled(self) -> None:
        """Return once ack() or nak() was called (only meaningful after defer())."""
        if not self.is_settled and self._settled_event is not None:
            await self._settled_event.wait()

    def _settle(self) -> bool:
        if self.is_settled:
            return False
        self.is_settled = True
        if self._settled_event is not None:
            self._settled_event.set()
        return True

    async def ack(self) -> None:
        """Acknowledge: the work is done and must not come back."""
        if self._settle():
            self.acked = True
            await _quietly(self.msg.ack())

    async def nak(self, delay_s: float | None = None) -> None:
        """Give the message back for redelivery, after `delay_s` if set."""
        if self._settle():
            await _quietly(self.msg.nak(delay=delay_s))

    def rebind(self, again: "Delivery") -> None:
        """Take over `again`, a redelivery of this message: settling now answers the newest
        delivery, whose ack the server will honour."""
        self.msg, self.deliveries = again.msg, max(self.deliveries, again.deliveries)
        self.rebound += 1

    async def keep_alive(self) -> None:
        """Reset the server's ack timer while work goes on."""
        if not self.is_settled:
            await _quietly(self.msg.in_progress())


async def _quietly(call: Awaitable[object]) -> None:
    # Settling only queues a publish in the client (no round trip), so it needs no timeout
    # of its own. An ack lost to an outage is recovered by redelivery plus de-duplication.
    try:
        await call
    except (nats.errors.Error, OSError) as exc:
        log.warning("message.settle_failed", error=repr(exc))


Handler = Callable[[M, Delivery], Awaitable[None]]


async def consume(
    bus: Bus,
    spec: subjects.ConsumerSpec,
    cls: type[M],
    handler: Handler,
    *,
    max_in_flight: int = 16,
    ack_wait_s: float | None = None,
    max_deliver: int | None = None,
    drain_s: float = 10.0,
) -> None:
    """Serve `spec` with `handler` until `bus.stopping` is set, then drain and return."""
    loop = _Loop(bus, spec, cls, handler, max_in_flight,
                 ack_wait_s or bus.settings.ack_wait_s,
                 max_deliver or bus.settings.max_deliver)
    await loop.run(drain_s)


class _Loop:
    def __init__(self, bus: Bus, spec: subjects.ConsumerSpec, cls: type, handler: Handler,
                 max_in_flight: int, ack_wait_s: float, max_deliver: int) -> None:
        self.bus, self.spec, self.cls, self.handler = bus, spec, cls, handler
        self.max_in_flight, self.ack_wait_s, self.max_deliver = max_in_flight, ack_wait_s, max_deliver
        self.held: dict[str, Delivery] = {}
        "Deliveries fetched and not yet released, by message id."
        self.parked = 0
        "Held deliveries whose handler deferred them: they free their slot only when settled."
        self.low_water = max(1, max_in_flight // 2)
        self.queue: deque[Delivery] = deque()
        self.idle: deque[anyio.Event] = deque()
        self.spare_woken = False
        self.recent = RecentIds()
        self.changed = anyio.Event()

    async def run(self, drain_s: float) -> None:
        await self._retry(lambda: self.bus.ensure_consumer(
            self.spec, ack_wait_s=self.ack_wait_s, max_deliver=self.max_deliver))
        sub = await self._retry(lambda: self.bus.js.pull_subscribe_bind(
            durable=self.spec.durable, stream=self.spec.stream))
        advisory_spec = subjects.advisory_consumer(self.spec)
        await self._retry(lambda: self.bus.ensure_consumer(advisory_spec, max_deliver=20))
        advisory = await self._retry(lambda: self.bus.js.pull_subscribe_bind(
            durable=advisory_spec.durable, stream=advisory_spec.stream))
        try:
            async with anyio.create_task_group() as work:
                work.start_soon(self._keep_alive)
                work.start_soon(self._dead_letter_given_up, advisory)
                for _ in range(self.max_in_flight):
                    work.start_soon(self._worker)
                await self._fetch_until_stopping(sub)
                with anyio.move_on_after(drain_s):
                    while self.held:
                        await self._wait_changed()
                work.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                for waiting in list(self.held.values()):  # fetched but never started
                    await waiting.nak()
                for sub_ in (advisory, sub):
                    try:
                        await sub_.unsubscribe()
                    except (nats.errors.Error, AttributeError):
                        pass

    async def _retry(self, make_call: Callable[[], Awaitable]):
        deadline = time.monotonic() + self.bus.settings.publish_deadline_s
        while True:
            try:
                return await make_call()
            except (nats.errors.Error, TimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise BusUnavailable(f"consumer {self.spec.durable}: {exc!r}") from exc
                await anyio.sleep(0.5)

    async def _wait_changed(self) -> None:
        self.changed = anyio.Event()
        await self.changed.wait()

    # A fixed pool of workers, one per slot, shares a queue. At most one idle worker is woken
    # ahead of need (the "spare"): with fast handlers one worker drains a whole batch in one
    # go; when a handler blocks, the spare takes the next message and wakes the next spare.

    async def _worker(self) -> None:
        while True:
            if not self.queue:
                wake = anyio.Event()
                self.idle.append(wake)
                await wake.wait()
                self.spare_woken = False
                continue
            delivery = self.queue.popleft()
            self._wake_spare()
            await self._handle(delivery)

    def _wake_spare(self) -> None:
        if self.queue and self.idle and not self.spare_woken:
            self.spare_woken = True
            self.idle.popleft().set()

    async def _fetch_until_stopping(self, sub) -> None:
        # Fetch in batches: wait until half the slots are free rather than asking the server
        # for one message at a time (a round trip per message halves throughput).
        while not self.bus.stopping.is_set():
            free = self.max_in_flight - len(self.held)
            if free < self._batch_threshold():
                await self._wait_changed()
                continue
            try:
                msgs = await sub.fetch(free, timeout=1.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except nats.errors.Error as exc:
                log.warning("consumer.fetch_failed", consumer=self.spec.durable, error=repr(exc))
                await anyio.sleep(0.25)
                continue
            for msg in msgs:
                await self._take(Delivery(msg))
            self.bus.stats.in_flight = len(self.held)
            self._wake_spare()

    async def _take(self, delivery: Delivery) -> None:
        """Queue a fetched message for a worker, unless this consumer already holds it."""
        held = self.held.get(delivery.msg_id)
        if held is None or (held.is_settled and not held.acked):
            self.held[delivery.msg_id] = delivery
            self.queue.append(delivery)
        elif held.stream_seq != delivery.stream_seq or held.acked:
            # Another stored copy of work in hand, or a redelivery racing an ack just sent.
            log.info("message.duplicate_skipped", msg_id=delivery.msg_id,
                     consumer=self.spec.durable, stream_seq=delivery.stream_seq)
            await _quietly(delivery.msg.ack())
        else:
            held.rebind(delivery)
            log.info("message.redelivery_rebound", msg_id=delivery.msg_id,
                     consumer=self.spec.durable, deliveries=delivery.deliveries)

    def _batch_threshold(self) -> int:
        # Parked (deferred) deliveries may hold their slots for minutes (the learner keeps
        # verdicts until a checkpoint): wait for half of the slots that can free soon, not
        # half of all, or a consumer holding half its slots parked would never fetch again.
        return max(1, min(self.low_water, (self.max_in_flight - self.parked) // 2))

    async def _handle(self, d: Delivery) -> None:
        try:
            await self._dispatch(d)
            if d.deferred:
                self.parked += 1
                self.changed.set()
                try:
                    await d.wait_settled()
                finally:
                    self.parked -= 1
        except BaseException:
            with anyio.CancelScope(shield=True):
                await d.nak()
            raise
        finally:
            if d.acked:
                self.recent.add(d.msg_id)
            if self.held.get(d.msg_id) is d:
                del self.held[d.msg_id]
            self.bus.stats.in_flight = len(self.held)
            # Wake the fetcher only when it has something to do: a batch's worth of free
            # slots, or nothing left to drain.
            if not self.held or self.max_in_flight - len(self.held) >= self._batch_threshold():
                self.changed.set()

    async def _dispatch(self, d: Delivery) -> None:
        if d.msg_id in self.recent:
            log.info("message.duplicate_skipped", msg_id=d.msg_id, consumer=self.spec.durable)
            await d.ack()
            return
        try:
            message = decode(d.msg.data, self.cls)
        except WireError as exc:
            await self._dead_letter(d.subject, d.stream_seq, d.msg.data, d.deliveries,
                                    exc.reason, str(exc))
            await d.ack()
            return
        bound = structlog.contextvars.bind_contextvars(msg_id=d.msg_id)
        try:
            await self.handler(message, d)
        except Exception as exc:  # noqa: BLE001 - any handler failure is retried or dead-lettered
            if d.deliveries >= self.max_deliver:
                await self._dead_letter(d.subject, d.stream_seq, d.msg.data, d.deliveries,
                                        "handler_error", repr(exc))
                await d.ack()
            else:
                log.warning("message.handler_failed", consumer=self.spec.durable,
                            deliveries=d.deliveries, error=repr(exc))
                await d.nak(delay_s=min(0.5 * 2 ** d.deliveries, 10.0))
            return
        finally:
            structlog.contextvars.reset_contextvars(**bound)
        if not d.deferred:
            await d.ack()
        self.bus.stats.processed += 1

    async def _keep_alive(self) -> None:
        while True:
            await anyio.sleep(self.ack_wait_s / 3)
            for d in list(self.held.values()):
                await d.keep_alive()

    async def _dead_letter_given_up(self, advisories) -> None:
        while True:
            try:
                msgs = await advisories.fetch(8, timeout=5.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except nats.errors.Error:
                await anyio.sleep(0.5)
                continue
            for msg in msgs:
                try:
                    await self._on_max_deliveries(msg)
                except (nats.errors.Error, TimeoutError, BusUnavailable) as exc:
                    log.warning("consumer.advisory_failed", error=repr(exc))
                    await _quietly(msg.nak(delay=1.0))
                else:
                    await _quietly(msg.ack())

    async def _on_max_deliveries(self, msg) -> None:
        try:
            seq = int(json.loads(msg.data)["stream_seq"])
            raw = await self.bus.js.get_msg(self.spec.stream, seq)
        except (nats.js.errors.NotFoundError, KeyError, ValueError):
            return  # already settled (for example dead-lettered by a handler) or not ours
        await self._dead_letter(raw.subject, seq, raw.data or b"", self.max_deliver,
                                "max_deliveries",
                                f"delivered {self.max_deliver} times without an ack "
                                "(the handling process died or hung each time)")
        try:
            await self.bus.js.delete_msg(self.spec.stream, seq)
        except nats.js.errors.NotFoundError:
            pass

    async def _dead_letter(self, subject: str, seq: int, payload: bytes, deliveries: int,
                           reason: str, error: str) -> None:
        letter = DeadLetter(
            subject=subject, stream=self.spec.stream, stream_seq=seq,
            consumer=self.spec.durable, reason=reason, error=error, payload=payload,
            deliveries=deliveries, instance=self.bus.identity.instance, at=time.time())
        await self.bus.publish(subjects.dead_letter_subject(self.spec.stream), letter,
                               msg_id=f"dlq.{self.spec.stream}.{seq}")
        log.error("message.dead_lettered", reason=reason, error=error, subject=subject,
                  stream=self.spec.stream, stream_seq=seq, consumer=self.spec.durable)
