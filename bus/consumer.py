"""Pull-consumer loop: bounded in-flight work, explicit acks, dead letters, graceful drain.

Consumes a durable JetStream consumer (`bus.subjects.ConsumerSpec`) and a handler
`async (message, delivery) -> None`; produces acks, naks and `DeadLetter` messages. At most
`max_in_flight` messages are held at once; each is handed to the handler once while held,
however often it is redelivered (`consume` says how). Once `bus.stopping` is set, no more
is fetched; in-flight handlers get `drain_s` to finish, then are cancelled and their
messages nak'ed for another instance.
It does not decide what work means: that is the handler's job.
"""

from __future__ import annotations

import contextvars
import json
from typing import Awaitable, Callable, TypeVar

import anyio
import anyio.abc
import nats.aio.msg
import nats.errors
import structlog
from nats.js.api import Header

from bus import subjects
from bus.codec import decode
from bus.dead_letters import DeadLetters
from bus.delivery import Delivery, RecentIds, settle_quietly
from bus.errors import WireError
from bus.messages import Message
from bus.nats_bus import Bus
from bus.nats_retry import retry

__all__ = ["Delivery", "Handler", "RecentIds", "consume"]

M = TypeVar("M", bound=Message)
T = TypeVar("T")
STATUS, DESCRIPTION = Header.STATUS.value, Header.DESCRIPTION.value
log = structlog.get_logger("bus.consumer")


def _msg_id_var() -> contextvars.ContextVar:
    """structlog's context variable for `msg_id` (bound and reset here, to get it)."""
    tokens = structlog.contextvars.bind_contextvars(msg_id=None)
    structlog.contextvars.reset_contextvars(**tokens)
    return tokens["msg_id"].var


_MSG_ID = _msg_id_var()

Handler = Callable[[M, Delivery], Awaitable[None]]

PULL_EXPIRES_S = 1.0
"""How long one pull request waits on the server for messages before it ends (status 408):
the pace at which an idle consumer notices that it should stop."""
NO_LEADER_PAUSE_S = 0.2
"""Pause before pulling again when no server answered (status 503): a replicated consumer
has no leader while its cluster elects one (seconds), and pulling at once again would spin
(thousands of requests a second, measured)."""


REFUSED_PAUSE_S = 1.0
"""How long to wait before asking again after the server refused a pull request (409: too
many requests waiting on the consumer, the consumer deleted, a leader change)."""


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
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `spec` with `handler` until `bus.stopping` is set, then drain and return.

    - Started (`await tg.start(partial(consume, ...))`) once the durable consumer exists on the
      server and deliveries can arrive; retries that set-up through an outage until
      `publish_deadline_s` (then BusUnavailable).
    - Backpressure: pull requests ask for as many messages as there are free slots; the
      deliveries come to a callback (no task per message, unlike nats-py's `fetch`) and go to
      a fixed pool of workers through a bounded memory stream.
    - A payload that cannot be decoded goes to the dead-letter subject with the reason, and the
      loop keeps serving. So does a message whose handler keeps failing, on its last delivery,
      and one the server gave up on (the MAX_DELIVERIES advisory) because its handler's process
      died each time.
    - A handler that returns normally has its message acked, unless it called `defer()`: then
      the message stays held (and kept alive) until the handler's owner settles it.
    - A redelivery of a held message (the server restarted, or its ack timer ran out during an
      outage) rebinds the held `Delivery` to the newest copy, so the holder's eventual ack lands
      on it; another copy with the same message id but another stream sequence is acked as a
      duplicate. A message id seen and acked recently is acked again without calling the
      handler: a late ack can land on a redelivery (nats-server issue 4786)."""
    loop = _Loop(bus, spec, cls, handler, max_in_flight,
                 ack_wait_s or bus.settings.ack_wait_s,
                 max_deliver or bus.settings.max_deliver)
    await loop.run(drain_s, task_status)


class _Pull:
    """The one pull request outstanding: how many messages it may still bring, and whether
    the server has ended it (all brought, or expired)."""

    __slots__ = ("left", "ended", "refused", "unanswered")

    def __init__(self, batch: int) -> None:
        self.left = batch
        self.ended = anyio.Event()
        self.refused = False
        self.unanswered = False
        "No server took the request (503): the consumer has no leader right now."


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
        self.to_workers, self.from_fetcher = anyio.create_memory_object_stream[Delivery](
            max_in_flight)
        self.idle = anyio.Lock(fast_acquire=True)
        "Held by the one idle worker that waits at the stream."
        self.pull = _Pull(0)
        self.recent = RecentIds()
        self.changed = anyio.Event()
        self.dead_letters = DeadLetters(bus, spec, max_deliver)

    async def run(self, drain_s: float, task_status: anyio.abc.TaskStatus[None]) -> None:
        advisory_spec = subjects.advisory_consumer(self.spec)
        await self._set_up(self.spec, lambda: self.bus.ensure_consumer(
            self.spec, ack_wait_s=self.ack_wait_s, max_deliver=self.max_deliver))
        inbox = self.bus.nc.new_inbox()
        deliveries = await self._set_up(self.spec, lambda: self.bus.nc.subscribe(
            inbox, cb=self._on_delivery))
        advisory = None
        try:
            await self._set_up(advisory_spec, lambda: self.bus.ensure_consumer(
                advisory_spec, max_deliver=20))
            advisory = await self._set_up(advisory_spec, lambda: self.bus.js.pull_subscribe_bind(
                durable=advisory_spec.durable, stream=advisory_spec.stream))
            task_status.started()
            async with self.from_fetcher, anyio.create_task_group() as work:
                work.start_soon(self._keep_alive)
                work.start_soon(self.dead_letters.serve_advisories, advisory)
                for _ in range(self.max_in_flight):
                    work.start_soon(self._worker)
                await self._fetch_until_stopping(inbox)
                with anyio.move_on_after(drain_s):
                    while self.held:
                        await self._wait_changed()
                work.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                for sub in (deliveries, advisory):
                    try:
                        if sub is not None:
                            await sub.unsubscribe()
                    except nats.errors.Error:
                        pass
                self.to_workers.close()
                for waiting in list(self.held.values()):  # fetched but never finished
                    await waiting.nak()

    def _set_up(self, spec: subjects.ConsumerSpec, call: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        # Setting up also waits while the stream does not exist yet (an actor started before
        # the topology, a server still recovering its store); a refusal is not waited out.
        return retry(call, what=f"consumer {spec.durable}",
                     deadline_s=self.bus.settings.publish_deadline_s,
                     first_delay_s=0.5, max_delay_s=0.5, retry_on=(nats.errors.Error, TimeoutError),
                     denied=lambda since: self.bus.raise_if_denied(
                         since, "", containing=f"{spec.stream}.{spec.durable}"))

    async def _wait_changed(self) -> None:
        self.changed = anyio.Event()
        await self.changed.wait()

    async def _worker(self) -> None:
        # A worker takes what is there without yielding, so with handlers that do not block
        # one worker runs a whole batch in one turn of the event loop and its acks leave in
        # one write to the socket. Only one idle worker waits at the stream (the others wait
        # for that turn): a batch wakes it, and it wakes the next only as it takes a message.
        while True:
            try:
                delivery = self.from_fetcher.receive_nowait()
            except anyio.WouldBlock:
                async with self.idle:
                    try:
                        delivery = await self.from_fetcher.receive()
                    except anyio.EndOfStream:
                        return
            await self._handle(delivery)

    async def _fetch_until_stopping(self, inbox: str) -> None:
        # Ask in batches: wait until half the slots are free rather than asking the server
        # for one message at a time (a round trip per message halves throughput).
        subject = subjects.next_messages(self.spec.stream, self.spec.durable)
        expires_ns = int(PULL_EXPIRES_S * 1e9)
        while not self.bus.stopping.is_set():
            free = self.max_in_flight - len(self.held)
            if free < self._batch_threshold():
                await self._wait_changed()
                continue
            self.pull = pull = _Pull(free)
            request = json.dumps({"batch": free, "expires": expires_ns}).encode()
            try:
                await self.bus.nc.publish(subject, request, reply=inbox)
            except nats.errors.Error as exc:  # the client's buffer is full while reconnecting
                log.warning("consumer.fetch_failed", consumer=self.spec.durable, error=repr(exc))
                await anyio.sleep(0.25)
                continue
            # The server ends the request by filling it or at expiry; a request lost with
            # the connection is given up after a margin, and another is sent.
            with anyio.move_on_after(PULL_EXPIRES_S + self.bus.settings.request_timeout_s):
                await pull.ended.wait()
            if pull.refused:  # asking again at once would refuse again, as fast as it can
                with anyio.move_on_after(REFUSED_PAUSE_S):
                    await self.bus.stopping.wait()
            elif pull.unanswered:  # no leader yet: pulling again at once would spin
                with anyio.move_on_after(NO_LEADER_PAUSE_S):
                    await self.bus.stopping.wait()

    async def _on_delivery(self, msg: nats.aio.msg.Msg) -> None:
        """Callback of the deliveries subscription: a message, or the status of a request."""
        status = msg.headers.get(STATUS) if msg.headers else None
        if status is not None:
            if status == "409":  # the request was refused (consumer deleted, ...): log it
                self.pull.refused = True
                log.warning("consumer.pull_refused", consumer=self.spec.durable,
                            description=msg.headers.get(DESCRIPTION, ""))
            if status != "100":  # 100 is a heartbeat; 404, 408, 409 and 503 end the request
                self.pull.unanswered = status == "503"
                self.pull.ended.set()
            return
        pull = self.pull
        pull.left -= 1
        if pull.left <= 0:
            pull.ended.set()
        delivery = Delivery(msg)
        if await self._take(delivery):
            try:
                try:
                    self.to_workers.send_nowait(delivery)  # no yield per message (see _worker)
                except anyio.WouldBlock:
                    await self.to_workers.send(delivery)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass  # stopping: it stays held and is given back with the rest

    async def _take(self, delivery: Delivery) -> bool:
        """Hold a fetched message for a worker (True), unless this consumer already holds it."""
        held = self.held.get(delivery.msg_id)
        if held is None or (held.is_settled and not held.acked):
            self.held[delivery.msg_id] = delivery
            self.bus.stats.in_flight = len(self.held)
            return True
        if held.stream_seq != delivery.stream_seq or held.acked:
            # Another stored copy of work in hand, or a redelivery racing an ack just sent.
            log.info("message.duplicate_skipped", msg_id=delivery.msg_id,
                     consumer=self.spec.durable, stream_seq=delivery.stream_seq)
            await settle_quietly(delivery.msg.ack())
        else:
            held.rebind(delivery)
            log.info("message.redelivery_rebound", msg_id=delivery.msg_id,
                     consumer=self.spec.durable, deliveries=delivery.deliveries)
        return False

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
            await self.dead_letters.send(d.subject, d.stream_seq, d.msg.data, d.deliveries,
                                    exc.reason, str(exc))
            await d.ack()
            return
        # Set, not bound and reset: a worker task handles one message at a time, and the
        # next one's id replaces it (a bind and a reset cost more than a 1 KB decode).
        _MSG_ID.set(d.msg_id)
        try:
            await self.handler(message, d)
        except Exception as exc:  # noqa: BLE001 - any handler failure is retried or dead-lettered
            if d.deliveries >= self.max_deliver:
                await self.dead_letters.send(d.subject, d.stream_seq, d.msg.data, d.deliveries,
                                        "handler_error", repr(exc))
                await d.ack()
            else:
                log.warning("message.handler_failed", consumer=self.spec.durable,
                            deliveries=d.deliveries, error=repr(exc))
                await d.nak(delay_s=min(0.5 * 2 ** d.deliveries, 10.0))
            return
        if not d.deferred:
            await d.ack()
        self.bus.stats.processed += 1

    async def _keep_alive(self) -> None:
        while True:
            await anyio.sleep(self.ack_wait_s / 3)
            for d in list(self.held.values()):
                await d.keep_alive()
