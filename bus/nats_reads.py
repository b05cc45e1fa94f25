"""Read-only views of streams: replay, a snapshot by sequence, depths and redeliveries.

Consumes stream names and message types; produces decoded messages and `StreamState`
values. Nothing here consumes work or acks: `whet tail`, `whet status`, traces and tests use
it to look. A mixin of `bus.nats_bus.Bus`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, TypeVar

import anyio
import nats.errors
import nats.js.errors
from nats.js import api

from bus.codec import decode
from bus.messages import Message

M = TypeVar("M", bound=Message)


@dataclass
class StreamState:
    """Depth and redelivery counts of one stream and its consumers."""

    name: str
    messages: int
    bytes: int
    consumers: dict[str, dict[str, int]]



class StreamReads:
    """`replay`, `snapshot` and `stream_states`; mixed into `Bus`."""

    async def replay(self, stream: str, filter_subject: str, cls: type[M], *,
                     since: float | None = None, follow: bool = True,
                     batch: int = 256) -> AsyncIterator[tuple[str, M | None, bytes]]:
        """Read `stream` without consuming it: (subject, message or None, raw payload).

        Starts at Unix time `since` (or the beginning); with `follow=False` it stops once
        caught up. Payloads that do not decode come back with message None.
        """
        import datetime as dt

        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE, inactive_threshold=60.0, mem_storage=True,
            deliver_policy=(api.DeliverPolicy.BY_START_TIME if since else api.DeliverPolicy.ALL),
            opt_start_time=(dt.datetime.fromtimestamp(since, dt.timezone.utc).isoformat()
                            if since else None))
        sub = await self.js.pull_subscribe(filter_subject, stream=stream, config=config)
        try:
            while True:
                try:
                    msgs = await sub.fetch(batch, timeout=1.0)
                except (nats.errors.TimeoutError, TimeoutError):
                    if not follow:
                        return
                    continue
                for msg in msgs:
                    try:
                        value: M | None = decode(msg.data, cls)
                    except Exception:  # noqa: BLE001 - shown raw to the reader
                        value = None
                    yield msg.subject, value, msg.data
                if not follow and msgs and msgs[-1].metadata.num_pending == 0:
                    return
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await sub.unsubscribe()
                except nats.errors.Error:
                    pass

    async def snapshot(self, stream: str, cls: type[M]) -> list[tuple[int, M | None]]:
        """Every message stored in `stream` now, by sequence, without a consumer.

        Works on work-queue streams too (which allow no second consumer); for audits and
        tests, not hot paths: one request per message.
        """
        info = await self.js.stream_info(stream)
        out: list[tuple[int, M | None]] = []
        if not info.state.messages:
            return out
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                raw = await self.js.get_msg(stream, seq)
            except nats.js.errors.NotFoundError:
                continue
            try:
                out.append((seq, decode(raw.data or b"", cls)))
            except Exception:  # noqa: BLE001 - shown as undecodable
                out.append((seq, None))
        return out

    async def stream_states(self, names: list[str]) -> list[StreamState]:
        """Depth of each stream and, per durable consumer, pending, in-flight and redelivered."""
        out = []
        for name in names:
            try:
                info = await self.js.stream_info(name)
            except nats.js.errors.NotFoundError:
                continue
            consumers = {}
            for c in await self.js.consumers_info(name):
                consumers[c.name] = {
                    "pending": c.num_pending or 0,
                    "in_flight": c.num_ack_pending or 0,
                    "redelivered": c.num_redelivered or 0,
                }
            out.append(StreamState(name, info.state.messages, info.state.bytes, consumers))
        return out
