"""A simulated actor for the scale bench: real bus client, heartbeats, consumer, publisher.

Consumes `Probe` messages from the bench work stream through `bus.consumer.consume` (one
durable shared by every instance, as each real kind shares one); publishes a `Probe` every
1/`RATE` seconds (exponential gaps) through `Bus.publish`. It runs under
`runtime.stack.actor.serve` (config `[actors] target = {sim = "bench.scale.scale_actor:run"}`), so
its connection, heartbeats and drain are the real ones. It does no model work, and it
measures only what one process can see: publish time, publish-to-handler latency, counts.
`bench/scale/scale.py` starts many of these per process and reads `RECORD`.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from functools import partial

import anyio
import anyio.abc

from bus import subjects
from bus.consumer import Delivery, consume
from bus.messages import Message
from bus.nats_bus import Bus

STREAM, SUBJECT, DURABLE = "BENCH_SCALE", "bench.scale.work", "sim"
SPEC = subjects.StreamSpec(STREAM, (SUBJECT,), "workqueue", max_bytes=256 * 1024 * 1024)
CONSUMER = subjects.ConsumerSpec(STREAM, DURABLE, SUBJECT)
RATE = 0.5
"Messages each simulated actor publishes per second (set by the worker before it starts)."


class Probe(Message, tag="whet.bench.probe.v1"):
    """A unit of bench work: sent by one simulated actor, handled by any other."""

    sender: str
    "Instance that published it."
    seq: int
    "The sender's count."
    sent_at: float
    "Unix time just before the publish call."
    pad: bytes = b""
    "Filler to a realistic small-message size."


@dataclass
class Record:
    """What the simulated actors of this process measured since the last `reset`."""

    publish_s: list[float] = field(default_factory=list)
    "Duration of each `Bus.publish` (until the server's ack)."
    latency_s: list[float] = field(default_factory=list)
    "Publish start to handler call, per handled message."
    handled: int = 0
    ready: int = 0
    "Actors of this process whose consumer is in place."
    first_handled: dict[str, float] = field(default_factory=dict)
    "Unix time of each instance's first handled message."
    buses: list[Bus] = field(default_factory=list)

    def reset(self) -> None:
        self.publish_s, self.latency_s, self.handled = [], [], 0


RECORD = Record()


async def run(bus: Bus, cfg, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve the bench stream and publish to it until `bus.stopping`."""
    instance = bus.identity.instance
    RECORD.buses.append(bus)

    async def handle(probe: Probe, delivery: Delivery) -> None:
        now = time.time()
        RECORD.latency_s.append(now - probe.sent_at)
        RECORD.handled += 1
        RECORD.first_handled.setdefault(instance, now)

    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, CONSUMER, Probe, handle, max_in_flight=4, drain_s=2.0))
        RECORD.ready += 1
        task_status.started()
        await publish_until_stopping(bus, instance)


async def publish_until_stopping(bus: Bus, instance: str) -> None:
    pad, seq = b"x" * 200, 0
    while not bus.stopping.is_set():
        with anyio.move_on_after(random.expovariate(RATE)):
            await bus.stopping.wait()
        if bus.stopping.is_set():
            return
        seq += 1
        start = time.time()
        await bus.publish(SUBJECT, Probe(sender=instance, seq=seq, sent_at=start, pad=pad),
                          msg_id=f"{instance}.{seq}.{start}")
        RECORD.publish_s.append(time.time() - start)
