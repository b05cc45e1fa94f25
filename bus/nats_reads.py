"""Read-only views of streams: replay, a snapshot by sequence, depths and redeliveries.

Consumes stream names and message types; produces decoded messages and `StreamState`
values. Nothing here consumes work or acks: `whet tail`, `whet status`, traces and tests use
it to look. A mixin of `bus.nats_bus.Bus`.
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass
from typing import AsyncIterator, TypeVar

import anyio
import nats.errors
import nats.js.errors
from nats.js import api

from bus.codec import decode
from bus.messages import Message
from bus.nats_retry import RETRYABLE, renewing, retry

M = TypeVar("M", bound=Message)
UNAVAILABLE_TRIES = 10
("Reads of a one-off replay that meet a 503 or an unanswered request (a stream or consumer "
 "leader being elected, as on a cluster just started on its stores).")


@dataclass
class StreamState:
    """Depth and redelivery counts of one stream and its consumers."""

    name: str
    messages: int
    bytes: int
    consumers: dict[str, dict[str, int]]


@dataclass
class _Read:
    """Where a replay is: renewed reads go on from the message after `after`."""

    since: float | None
    after: int = 0
    "Stream sequence of the last message given."


class StreamReads:
    """`replay`, `snapshot` and `stream_states`; mixed into `Bus`."""

    async def replay(self, stream: str, filter_subject: str, cls: type[M], *,
                     since: float | None = None, follow: bool = True,
                     batch: int = 256) -> AsyncIterator[tuple[str, M | None, bytes]]:
        """Read `stream` without consuming it: (subject, message or None, raw payload).

        Starts at Unix time `since` (or the beginning); with `follow=False` it stops once
        caught up. Payloads that do not decode come back with message None. Following, it
        rides through a server restart (which loses its in-memory consumer): the read is
        renewed (`bus.nats_retry.renewing`) from the message after the last one it gave, so
        nothing is skipped or repeated.
        """
        read = _Read(since)
        if not follow:
            # A replicated stream just after a leader change answers 503, or not at all, for
            # a moment: the read is renewed from the message after the last one it gave, a
            # few times.
            for attempt in range(UNAVAILABLE_TRIES):
                try:
                    async with aclosing(self._read_once(stream, filter_subject, cls, read, batch,
                                                        follow=False)) as items:
                        async for item in items:
                            yield item
                    return
                except (nats.js.errors.ServiceUnavailableError, nats.errors.TimeoutError):
                    if attempt == UNAVAILABLE_TRIES - 1:
                        raise
                    await anyio.sleep(0.5)
            return
        async for item in renewing(lambda: self._read_once(stream, filter_subject, cls, read,
                                                           batch, follow=True),
                                   what=f"replay {stream}", first_delay_s=0.5):
            yield item

    async def _read_once(self, stream: str, filter_subject: str, cls: type[M], read: "_Read",
                         batch: int, *, follow: bool):
        """One ephemeral consumer's worth of `replay`, from the message after `read.after`."""
        sub = await self._replay_subscription(stream, filter_subject, read, retry_=follow)
        try:
            while True:
                try:
                    msgs = await sub.fetch(batch, timeout=1.0)
                except (nats.errors.TimeoutError, TimeoutError):
                    if not follow:
                        return
                    continue
                for msg in msgs:
                    read.after = msg.metadata.sequence.stream
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

    async def _replay_subscription(self, stream: str, filter_subject: str, read: "_Read",
                                   retry_: bool):
        """An ephemeral, unacked consumer from the message after `read.after` (else from
        `read.since`, else the start); retried through outages when `retry_`, also while the
        stream does not exist yet."""
        import datetime as dt

        if read.after:
            start = dict(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                         opt_start_seq=read.after + 1)
        elif read.since:
            start = dict(deliver_policy=api.DeliverPolicy.BY_START_TIME,
                         opt_start_time=dt.datetime.fromtimestamp(
                             read.since, dt.timezone.utc).isoformat())
        else:
            start = dict(deliver_policy=api.DeliverPolicy.ALL)
        config = api.ConsumerConfig(ack_policy=api.AckPolicy.NONE, inactive_threshold=60.0,
                                    mem_storage=True, **start)

        def subscribe():
            return self.js.pull_subscribe(filter_subject, stream=stream, config=config)

        if not retry_:
            return await subscribe()
        return await retry(subscribe, what=f"replay {stream}",
                           deadline_s=self.settings.publish_deadline_s, first_delay_s=0.5,
                           max_delay_s=0.5, retry_on=(*RETRYABLE, nats.js.errors.APIError),
                           denied=lambda since: self.raise_if_denied(
                               since, "", containing=f"$JS.API.CONSUMER.CREATE.{stream}"))

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
