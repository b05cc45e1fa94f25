"""Many instances on one durable consumer: their pull requests all wait, and a refused pull
request is not asked again at once.

At 1,000 simulated actors (bench/scale/scale.py) the server's default of 512 waiting pull requests
per durable refused the 513th instance's requests (409 Exceeded MaxWaiting).
"""

from __future__ import annotations

import json
from functools import partial

import anyio
import pytest
from nats.js import api
from structlog.testing import capture_logs

from bus import subjects
from bus.consumer import REFUSED_PAUSE_S, consume
from bus.messages import ScaleTarget
from tests.conftest import until

pytestmark = pytest.mark.bus

SPEC = subjects.CONSUMER_TASKS


async def pull_requests(bus, durable: str, n: int, inbox: str) -> None:
    """Send `n` pull requests of one message each, waiting 30 s on the server."""
    request = json.dumps({"batch": 1, "expires": 30 * 10**9}).encode()
    for _ in range(n):
        await bus.nc.publish(subjects.next_messages(SPEC.stream, durable), request, reply=inbox)
    await bus.nc.flush()


async def test_a_durable_keeps_the_pull_requests_of_more_than_512_instances_waiting(bus):
    """600 instances' pull requests all wait on the durable: none is refused."""
    await bus.ensure_consumer(SPEC)
    refused = []

    async def on_status(msg) -> None:
        if msg.headers and msg.headers.get("Status") == "409":
            refused.append(msg.headers.get("Description"))

    inbox = bus.nc.new_inbox()
    sub = await bus.nc.subscribe(inbox, cb=on_status)

    async def all_waiting() -> bool:
        return (await bus.js.consumer_info(SPEC.stream, SPEC.durable)).num_waiting == 600

    await pull_requests(bus, SPEC.durable, 600, inbox)
    await until(all_waiting, 10, what=lambda: f"refused: {refused[:3]}")
    assert refused == []
    await sub.unsubscribe()


async def test_a_refused_pull_request_is_asked_again_after_a_pause(bus):
    """Refused (the durable's waiting requests are full), a consumer asks about once per
    pause, not as fast as the server answers."""
    durable = "one-waiting"
    await bus.js.add_consumer(SPEC.stream, api.ConsumerConfig(
        durable_name=durable, ack_policy=api.AckPolicy.EXPLICIT, filter_subject=SPEC.filter_subject,
        max_waiting=1))
    holder = bus.nc.new_inbox()
    await bus.nc.subscribe(holder)  # the server drops a waiting request nobody listens for
    await pull_requests(bus, durable, 1, holder)  # takes the only waiting place
    spec = subjects.ConsumerSpec(SPEC.stream, durable, SPEC.filter_subject)

    async def handle(msg, delivery) -> None:
        pass

    with capture_logs() as logs:
        def refusals() -> list[dict]:
            return [e for e in logs if e["event"] == "consumer.pull_refused"]

        async with anyio.create_task_group() as tg:
            await tg.start(partial(consume, bus, spec, ScaleTarget, handle))
            await until(lambda: len(refusals()) >= 1, 10)
            first = anyio.current_time()
            await until(lambda: len(refusals()) >= 3, 10)
            elapsed = anyio.current_time() - first
            bus.stopping.set()
    assert "MaxWaiting" in refusals()[0]["description"]
    assert elapsed >= 1.5 * REFUSED_PAUSE_S, f"3 refusals within {elapsed:.2f} s"
