"""Dead letters of one consumer: messages it cannot or may not handle, kept with the reason.

Consumes a consumer's spec, the payload and reason of a message it gives up on, and the
server's MAX_DELIVERIES advisories for that consumer (read through a durable of their own);
produces `DeadLetter` messages on the dead-letter subject of the stream and removes a
given-up message from its stream once its letter is stored. It does not decide what to give
up on: `bus.consumer` does (a payload that does not decode, a handler that fails on its last
delivery), and the server does (a message whose handling process died every time).
A payload too large for a letter to carry within the server's payload limit is cut, its size
and sha256 kept; the error is one line of at most `ERROR_CHARS`.
"""

from __future__ import annotations

import hashlib
import json
import time

import anyio
import nats.errors
import nats.js.errors
import structlog

from bus import subjects
from bus.delivery import settle_quietly
from bus.errors import BusUnavailable
from bus.messages import DeadLetter
from bus.nats_bus import Bus

log = structlog.get_logger("bus.consumer")

ERROR_CHARS = 2000
"Most characters of a letter's error: a traceback is folded onto one line and cut."
LETTER_ROOM = 64 * 1024
"Bytes of the server's payload limit kept for the letter's own fields and headers."


class DeadLetters:
    """Writes the dead letters of the consumer `spec`."""

    def __init__(self, bus: Bus, spec: subjects.ConsumerSpec, max_deliver: int) -> None:
        self.bus, self.spec, self.max_deliver = bus, spec, max_deliver

    async def send(self, subject: str, seq: int, payload: bytes, deliveries: int,
                   reason: str, error: str) -> None:
        """Store the dead letter of stream message `seq` (once: its msg id is the seq)."""
        spec = self.spec
        error = one_line(error)
        room = max(0, self.bus.nc.max_payload - LETTER_ROOM - len(error.encode()))
        kept = payload[:room]
        letter = DeadLetter(
            subject=subject, stream=spec.stream, stream_seq=seq, consumer=spec.durable,
            reason=reason, error=error, payload=kept, deliveries=deliveries,
            instance=self.bus.identity.instance, at=time.time(), payload_bytes=len(payload),
            payload_sha256=hashlib.sha256(payload).hexdigest())
        await self.bus.publish(subjects.dead_letter_subject(spec.stream), letter,
                               msg_id=f"dlq.{spec.stream}.{seq}")
        log.error("message.dead_lettered", reason=reason, error=error[:500], subject=subject,
                  stream=spec.stream, stream_seq=seq, consumer=spec.durable,
                  payload_bytes=len(payload), payload_cut=len(kept) < len(payload))

    async def serve_advisories(self, advisories) -> None:
        """Dead-letter each message the server gave up on, from its advisories, forever."""
        while True:
            try:
                msgs = await advisories.fetch(8, timeout=5.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except nats.errors.Error:
                await anyio.sleep(0.5)  # the server is away: the next fetch waits for it
                continue
            for msg in msgs:
                try:
                    await self._on_max_deliveries(msg)
                except (nats.errors.Error, TimeoutError, BusUnavailable) as exc:
                    log.warning("consumer.advisory_failed", error=repr(exc))
                    await settle_quietly(msg.nak(delay=1.0))
                else:
                    await settle_quietly(msg.ack())

    async def _on_max_deliveries(self, msg) -> None:
        try:
            seq = int(json.loads(msg.data)["stream_seq"])
            raw = await self.bus.js.get_msg(self.spec.stream, seq)
        except (nats.js.errors.NotFoundError, KeyError, ValueError):
            return  # already settled (for example dead-lettered by a handler) or not ours
        await self.send(raw.subject, seq, raw.data or b"", self.max_deliver, "max_deliveries",
                        f"delivered {self.max_deliver} times without an ack "
                        "(the handling process died or hung each time)")
        try:
            await self.bus.js.delete_msg(self.spec.stream, seq)
        except nats.js.errors.NotFoundError:
            pass


def one_line(error: str) -> str:
    """`error` on one line (newlines and runs of blanks folded), at most `ERROR_CHARS`."""
    text = " ".join(error.split())
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS - 1] + "…"
