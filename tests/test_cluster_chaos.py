"""Cluster chaos: kill -9 NATS nodes, leaders first, during a training run on a 3-node cluster.

The stack of `tests.test_chaos` (every kind as its own process under `whet up`, the fake
engine, the tiny learner) runs with `[bus] replicas = 3` against the test's own 3-node
cluster, every actor given all three URLs. One node at a time is killed with SIGKILL, each
kill once the stack is healthy and work has moved on since the last: the node that leads the
JetStream meta group, or the one that leads the verdicts, tasks, executions or heartbeats
stream, in turn. It is restarted on its own store after a seeded pause. The actors fail over
by themselves; the run is then drained and reconciled exactly as in `tests.test_chaos`:
every admitted attempt has one verdict and one fate, none trained twice.

For each kill it records how long no work completed: from the kill to the next verdict
stored. CI kills 3 times (about a minute and a half here); `CLUSTER_KILLS=6` (as
`bench/chaos/cluster_chaos.py` runs it) kills more, and `CHAOS_SEED` varies pauses and order.
"""

from __future__ import annotations

import json
import os
import random
import time
from datetime import datetime, timezone

import anyio
import pytest

from bus import subjects
from bus.nats_bus import Bus, Identity
from runtime.broker.cluster import monitoring
from runtime.config import RunConfig
from runtime.connect import topology
from tests.conftest import Stack, bus_settings, patiently, until
from tests.support.chaos import patient_max_deliver
from tests.test_chaos import (CONFIG, SEED, Chaos, drain_and_stop, healthy, reconcile,
                              verdict_count)

pytestmark = pytest.mark.stack

KILLS = int(os.environ.get("CLUSTER_KILLS", "3"))
TARGETS = ("meta", subjects.STREAM_VERDICTS, subjects.STREAM_TASKS, subjects.STREAM_EXEC,
           subjects.kv_stream(subjects.BUCKET_ACTORS), subjects.STREAM_ATTEMPTS)
"What each kill aims at, in turn: the meta leader, or the leader of one stream."
LED = (subjects.STREAM_VERDICTS, subjects.STREAM_TASKS, subjects.STREAM_ATTEMPTS,
       subjects.STREAM_EXEC, subjects.STREAM_EXEC_DONE,
       subjects.kv_stream(subjects.BUCKET_ACTORS), subjects.kv_stream(subjects.BUCKET_RUN))
"Streams whose leaders each kill reports (what the killed node was leading)."
CONSUMERS = (subjects.CONSUMER_TASKS, subjects.CONSUMER_ATTEMPTS, subjects.CONSUMER_EXEC,
             subjects.CONSUMER_EXEC_DONE, subjects.CONSUMER_LEARNER)
"Work consumers, each its own raft group with its own leader: each kill reports those it led."
BUS_TEXT = (f"ack_wait_s = 3.0\nrequest_timeout_s = 2.0\nreplicas = 3\n"
            f"max_deliver = {patient_max_deliver(3.0)}")


async def consumer_leader(bus: Bus, spec) -> str:
    async def ask() -> str:
        info = await bus.js.consumer_info(spec.stream, spec.durable)
        return info.cluster.leader if info.cluster and info.cluster.leader else ""
    return await patiently(ask)


async def leader_of(bus: Bus, stream: str) -> str:
    async def ask() -> str:
        info = await bus.js.stream_info(stream)
        return info.cluster.leader if info.cluster and info.cluster.leader else ""
    return await patiently(ask)


class ClusterChaos(Chaos):
    """Kills one node at a time, each the leader of what the schedule names, and measures
    the stall after each: seconds from the kill to the next verdict stored."""

    def __init__(self, bus, cluster, run_dir) -> None:
        super().__init__(bus, None, run_dir)
        self.cluster = cluster
        self.rng = random.Random(SEED)
        self.kills: list[dict] = []

    async def run(self) -> bool:
        verdicts = await patiently(lambda: verdict_count(self.bus))
        for n in range(KILLS):
            await self.settled_and_moving(verdicts)
            verdicts = await patiently(lambda: verdict_count(self.bus))
            await self.kill_one(TARGETS[n % len(TARGETS)])
        snap = await self.settled_and_moving(verdicts)
        return healthy(snap, self.last_server_start)

    async def kill_one(self, target: str) -> None:
        meta = await anyio.to_thread.run_sync(self.cluster.meta_leader)
        leaders = {s: await leader_of(self.bus, s) for s in LED}
        consumers = {c.durable: await consumer_leader(self.bus, c) for c in CONSUMERS}
        name = meta if target == "meta" else await leader_of(self.bus, target)
        node = self.cluster.node(name)
        before = await patiently(lambda: verdict_count(self.bus))
        node.kill()
        killed_at, killed_wall = time.monotonic(), time.time()
        stall: list[float] = []
        elected: list[float] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.time_to_next_verdict, before, killed_at, stall)
            tg.start_soon(self.time_to_new_leader, target, name, killed_at, elected)
            await anyio.sleep(self.rng.uniform(0.5, 2.0))  # staging: an outage of random length
            await anyio.to_thread.run_sync(node.start)
            down_s = time.monotonic() - killed_at
            await anyio.to_thread.run_sync(lambda: self.cluster.wait_ready(60, [node]))
        self.last_server_start = time.time()
        self.killed.append(("nats", node.pid or 0))
        self.kills.append({"target": target, "node": name, "meta": name == meta, "at": killed_wall,
                           "led": sorted(s for s, who in leaders.items() if who == name),
                           "consumers": sorted(c for c, who in consumers.items() if who == name),
                           "down_s": down_s, "stall_s": stall[0], "elected_s": elected[0]})

    async def time_to_next_verdict(self, before: int, killed_at: float,
                                   out: list[float]) -> None:
        async def moved() -> bool:
            return await patiently(lambda: verdict_count(self.bus)) > before

        await until(moved, 120, f"a verdict stored after the {before} before the kill")
        out.append(time.monotonic() - killed_at)


    async def time_to_new_leader(self, target: str, killed: str, killed_at: float,
                                 out: list[float]) -> None:
        """Seconds until a leader elected after the kill leads `target` (the meta group, or a
        stream); the restarted node may win it back."""
        since = datetime.now(timezone.utc)
        await until(lambda: self.elected(target, killed, since), 120,
                    f"a leader of {target} elected after {killed} was killed")
        out.append(time.monotonic() - killed_at)

    async def elected(self, target: str, killed: str, since: datetime) -> bool:
        if target != "meta":
            leader = (await patiently(lambda: self.bus.js.stream_info(target))).cluster
            return bool(leader.leader) and (leader.leader != killed or bool(
                leader.leader_since and leader.leader_since > since))
        for node in self.cluster.nodes:  # a survivor may still name the dead leader
            jsz = await anyio.to_thread.run_sync(monitoring, node, "/jsz")
            leader = (jsz or {}).get("meta_cluster", {}).get("leader", "")
            if leader and (leader != killed or node.server_name == killed):
                return True
        return False


def kill_table(kills: list[dict]) -> str:
    lines = [f"{'kill':>4} {'node':>8} {'target':>18} {'meta':>5} {'down s':>7} "
             f"{'new leader s':>12} {'no work s':>9}  streams | consumers it led"]
    for n, k in enumerate(kills, 1):
        lines.append(f"{n:>4} {k['node']:>8} {k['target']:>18} {'yes' if k['meta'] else '':>5} "
                     f"{k['down_s']:>7.1f} {k['elected_s']:>12.1f} {k['stall_s']:>9.1f}  "
                     f"{', '.join(k['led']) or '-'} | {', '.join(k['consumers']) or '-'}")
    return "\n".join(lines)


@pytest.fixture
async def cluster_bus(nats_cluster):
    """A bus on every node of the test's cluster, with the replicated topology made."""
    settings = bus_settings(nats_cluster.url, replicas=3)
    bus = await Bus.connect(settings, Identity("test", "test-1"))
    await bus.ensure_topology(topology(RunConfig()))
    yield bus
    await bus.close()


@pytest.fixture
def cluster_stack(tmp_path, nats_cluster):
    """`whet up` on the test's cluster with replicas = 3; stopped after the test."""
    stack = Stack(tmp_path, nats_cluster.url, CONFIG, BUS_TEXT)
    yield stack
    try:
        stack.stop()
    finally:
        if stack.proc and stack.proc.poll() is None:
            stack.proc.kill()


async def test_node_kills_lose_nothing(cluster_stack, cluster_bus, nats_cluster):
    """kill -9 of one NATS node at a time (the meta leader and stream leaders among them)
    during a run on a 3-replica cluster: the run trains on, and afterwards every admitted
    attempt has one verdict and one fate, none trained twice, nothing left queued."""
    stack, bus = cluster_stack, cluster_bus
    await anyio.to_thread.run_sync(stack.start)
    chaos = ClusterChaos(bus, nats_cluster, stack.run_dir)
    began = time.monotonic()
    recovered = await chaos.run()
    chaos_s = time.monotonic() - began
    await drain_and_stop(bus, stack)

    assert len(chaos.kills) == KILLS >= 3
    assert any(k["meta"] for k in chaos.kills), "the meta leader was never killed"
    assert {subjects.STREAM_VERDICTS, subjects.STREAM_TASKS} <= {
        s for k in chaos.kills for s in k["led"]}, "a work stream's leader was never killed"
    assert recovered, "after the last kill every actor is back, reconnected, and work flows"
    outcome = await reconcile(bus, stack)
    stalls = [k["stall_s"] for k in chaos.kills]
    print(f"cluster chaos seed {SEED}, {chaos_s:.0f} s, {KILLS} node kills, "
          f"no-work seconds {[round(s, 1) for s in stalls]}, {outcome}")
    print(kill_table(chaos.kills))
    print("cluster chaos kills " + json.dumps(chaos.kills))
