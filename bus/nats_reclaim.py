"""Room in a full kept stream: remove the oldest messages every reader has acked.

Consumes a stream name; produces a purge of the messages below the lowest point every
durable consumer on it has handled, and the count removed. The verdict stream keeps
verdicts for `retention_h` after the learner, sampler, evaluator and monitor have read them;
when it fills before they age out, the judge calls this instead of waiting for them.

It never removes a message some durable has not acked or not yet been delivered, and it
removes nothing from a stream with no durables, nor while a max-deliveries advisory for the
stream waits to be dead-lettered (the dead letter copies the message from the stream). A reader whose durable does not exist yet
is not protected: it starts from what is left. It does not touch work queues (the server
removes their messages on ack). A mixin of `bus.nats_bus.Bus`.
"""

from __future__ import annotations

import nats.js.errors
import structlog

from bus import subjects

log = structlog.get_logger("bus")


def handled_through(last_seq: int, consumer) -> int:
    """The highest stream sequence below which `consumer` has acked everything it matches.

    The server's ack floor of a filtered consumer stops at the last message its filter
    matched, so a consumer with nothing pending and nothing in flight counts as having
    handled the whole stream as of `last_seq` (read before the consumer's info).
    """
    if consumer.num_pending == 0 and consumer.num_ack_pending == 0:
        return max(last_seq, consumer.ack_floor.stream_seq)
    return consumer.ack_floor.stream_seq


class StreamReclaim:
    """The `Bus` calls that make room in a full stream (`js`: the JetStream context)."""

    js: object

    async def reclaim_consumed(self, stream: str) -> int:
        """Purge the messages of `stream` every durable consumer has acked; returns how many
        sequences the purge covered (0 when no message can go)."""
        try:
            before = await self.js.stream_info(stream)
            consumers = await self.js.consumers_info(stream)
        except nats.js.errors.NotFoundError:
            return 0
        if not consumers or await self._dead_letters_due(stream):
            return 0
        floor = min(handled_through(before.state.last_seq, c) for c in consumers)
        if floor < before.state.first_seq:
            return 0
        await self.js.purge_stream(stream, seq=floor + 1)
        removed = floor - before.state.first_seq + 1
        log.info("bus.reclaimed", stream=stream, removed=removed, through_seq=floor,
                 readers=len(consumers))
        return removed

    async def _dead_letters_due(self, stream: str) -> bool:
        """True while the server's give-up advisory for a message of `stream` is unhandled."""
        try:
            info = await self.js.stream_info(
                subjects.STREAM_ADVISORIES,
                subjects_filter=subjects.max_deliveries_advisory(stream, "*"))
        except nats.js.errors.NotFoundError:
            return False
        return bool(info.state.subjects)
