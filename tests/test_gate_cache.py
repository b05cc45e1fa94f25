"""Gate reports kept across runs: a second run on the machine finds them; outages are not kept."""

from __future__ import annotations

import pytest

from bus.nats_bus import Bus, Identity
from envs import registry
from envs.config import EnvEntry, GateConfig
from envs.environment import generate
from envs.gates import GateReport
from envs.intake import KvGateCache
from runtime.config import RunConfig
from runtime.connect import topology
from tests.conftest import bus_settings

pytestmark = pytest.mark.bus


async def test_a_report_is_found_by_the_next_run_and_an_outage_is_not_kept(
        bus, nats_server, tmp_path, monkeypatch):
    """A report put in one run is read back by another run (another run id, so another KV
    namespace) from disk; a report whose reason is an infrastructure failure is kept nowhere,
    and with keep_on_disk off nothing is read from disk."""
    monkeypatch.setenv("WHET_GATE_CACHE", str(tmp_path / "gates"))
    [solid, flaky] = list(generate(registry.resolve("python_functions", EnvEntry()), 2, seed=3))
    gates = GateConfig()
    first = KvGateCache(bus)
    await first.put(solid, gates, GateReport(solid.task_id, mutants=12, killed=11))
    outage = GateReport(flaky.task_id)
    outage.reject("infra", "sandbox down")
    await first.put(flaky, gates, outage)

    other = await Bus.connect(bus_settings(nats_server.url), Identity("sampler", "sampler-1", "run-2"))
    try:
        await other.ensure_topology(topology(RunConfig()))
        later = KvGateCache(other)
        found = await later.get(solid, gates)
        assert found is not None and (found.mutants, found.killed) == (12, 11)
        assert await later.get(flaky, gates) is None
        assert await KvGateCache(other, keep_on_disk=False).get(solid, gates) is None
    finally:
        await other.close()
