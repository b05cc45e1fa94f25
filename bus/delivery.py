"""One delivered message and how it is settled; the ids a consumer finished recently.

Consumes a nats-py message delivered by a pull consumer; produces acks, naks and
in-progress signals for it. A `Delivery` is what a handler gets beside the decoded message:
`defer()` keeps it held after the handler returns, `ack()`/`nak()` settle it once (later
calls do nothing), and `rebind()` points it at a redelivery of the same message. It does not
fetch, decode or decide anything: `bus.consumer` does.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Awaitable

import anyio
import nats.aio.msg
import nats.errors
import structlog

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


def ack_fields(reply: str) -> tuple[str, int, int]:
    """(stream, times delivered, stream sequence) from a JetStream message's ack subject:
    `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>...` (9 tokens), or with a domain
    and an account hash before the stream (11 or 12 tokens). nats-py's `Msg.metadata`
    parses more than this (a datetime too) and costs as much as decoding a 1 KB message."""
    t = reply.split(".")
    if len(t) == 9:
        return t[2], int(t[4]), int(t[5])
    if len(t) >= 11 and t[0] == "$JS" and t[1] == "ACK":
        return t[4], int(t[6]), int(t[7])
    raise ValueError(f"not a JetStream ack subject: {reply!r}")


class Delivery:
    """One delivered message and the means to settle it."""

    def __init__(self, msg: nats.aio.msg.Msg) -> None:
        self.msg = msg
        stream, self.deliveries, self.stream_seq = ack_fields(msg.reply)
        self.subject: str = msg.subject
        header_id = msg.headers.get("Nats-Msg-Id") if msg.headers else None
        self.msg_id: str = header_id or f"{stream}:{self.stream_seq}"
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
            await settle_quietly(self.msg.ack())

    async def nak(self, delay_s: float | None = None) -> None:
        """Give the message back for redelivery, after `delay_s` if set."""
        if self._settle():
            await settle_quietly(self.msg.nak(delay=delay_s))

    def rebind(self, again: "Delivery") -> None:
        """Take over `again`, a redelivery of this message: settling now answers the newest
        delivery, whose ack the server will honour."""
        self.msg, self.deliveries = again.msg, max(self.deliveries, again.deliveries)
        self.rebound += 1

    async def keep_alive(self) -> None:
        """Reset the server's ack timer while work goes on."""
        if not self.is_settled:
            await settle_quietly(self.msg.in_progress())


async def settle_quietly(call: Awaitable[object]) -> None:
    """Await an ack, nak or in-progress call; a failure is logged, not raised."""
    # Settling only queues a publish in the client (no round trip), so it needs no timeout
    # of its own. An ack lost to an outage is recovered by redelivery plus de-duplication.
    try:
        await call
    except (nats.errors.Error, OSError) as exc:
        log.warning("message.settle_failed", error=repr(exc))
