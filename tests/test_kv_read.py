"""Reading a whole KV bucket (`Bus.kv_items`): every live key, in one pass.

`whet status`, the monitor and the progress line read every actor's heartbeat this way; with
a request per key the read grew with the actor count (seconds at 1,000 actors, see
bench/scale/scale.py). The server's own count of JetStream API requests (/jsz) shows the pass.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from bus import subjects
from bus.messages import Heartbeat, ScaleTarget
from bus.nats_bus import Bus, Identity
from runtime.broker.embedded import EmbeddedServer
from runtime.config import RunConfig
from runtime.connect import topology
from tests.conftest import STORE_MB, bus_settings

pytestmark = pytest.mark.bus


@pytest.fixture
async def watched(tmp_path):
    """A bus on a server whose monitoring endpoint is on, and that endpoint's URL."""
    server = EmbeddedServer(tmp_path / "nats", max_file_store_mb=STORE_MB, monitor=True)
    server.start()
    bus = await Bus.connect(bus_settings(server.url), Identity("test", "test-1"))
    await bus.ensure_topology(topology(RunConfig()))
    yield bus, server.monitoring_url
    await bus.close()
    server.kill()


def api_requests(monitoring_url: str) -> int:
    with urllib.request.urlopen(monitoring_url + "/jsz", timeout=5) as r:
        return json.load(r)["api"]["total"]


def beat(instance: str, at: float) -> Heartbeat:
    return Heartbeat(kind="executor", instance=instance, pid=1, host="h", state="ready",
                     started_at=at, beat_at=at)


async def test_reading_every_heartbeat_takes_a_few_requests_whatever_their_number(watched):
    """300 heartbeats are read whole with a handful of JetStream API requests, not one per key."""
    bus, monitoring = watched
    for i in range(300):
        await bus.kv_put(subjects.BUCKET_ACTORS, subjects.actor_key("executor", f"e-{i}"),
                         beat(f"e-{i}", float(i)))
    await bus.kv_put(subjects.BUCKET_ACTORS, subjects.actor_key("executor", "e-7"), beat("e-7", 1e9))
    before = api_requests(monitoring)
    beats = await bus.kv_items(subjects.BUCKET_ACTORS, Heartbeat)
    used = api_requests(monitoring) - before
    assert len(beats) == 300
    assert beats["executor.e-7"].beat_at == 1e9  # the latest value of a key written twice
    assert beats["executor.e-299"].instance == "e-299"
    assert used <= 5, f"{used} API requests for one read of 300 keys"


async def test_bucket_read_skips_deleted_keys_and_keeps_to_its_prefix(watched):
    """Deleted keys are left out, and a prefix keeps only the keys under it."""
    bus, _ = watched
    for kind in ("judge", "executor", "executorx"):
        await bus.kv_put(subjects.BUCKET_RUN, subjects.scale_key(kind),
                         ScaleTarget(kind=kind, count=2, requested_at=1.0))
    await bus.kv_put_bytes(subjects.BUCKET_RUN, "other", b"not a target")
    await bus.kv_delete(subjects.BUCKET_RUN, subjects.scale_key("judge"))
    targets = await bus.kv_items(subjects.BUCKET_RUN, ScaleTarget, prefix="scale.")
    assert sorted(targets) == [subjects.scale_key("executor"), subjects.scale_key("executorx")]
    assert await bus.kv_items(subjects.BUCKET_RUN, ScaleTarget, prefix="scale.executor") == {
        k: v for k, v in targets.items() if k.startswith("scale.executor")}
    assert await bus.kv_items(subjects.BUCKET_POLICY, ScaleTarget) == {}


async def test_a_prefix_with_no_key_under_it_is_read_once_though_the_bucket_holds_others(watched):
    """An empty read is taken again only where the server counts keys under the prefix, so
    a prefix that holds none costs one pass even in a bucket full of other keys."""
    bus, monitoring = watched
    for kind in ("judge", "executor"):
        await bus.kv_put(subjects.BUCKET_RUN, subjects.scale_key(kind),
                         ScaleTarget(kind=kind, count=2, requested_at=1.0))
    assert await bus._holds_keys(subjects.BUCKET_RUN, "scale.")
    assert not await bus._holds_keys(subjects.BUCKET_RUN, subjects.FAILING_PREFIX)
    before = api_requests(monitoring)
    assert await bus.kv_items(subjects.BUCKET_RUN, ScaleTarget, prefix=subjects.FAILING_PREFIX) == {}
    used = api_requests(monitoring) - before
    assert used <= 3, f"{used} API requests for an empty prefix"
