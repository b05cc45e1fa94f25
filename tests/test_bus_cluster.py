"""The replicated bus: `[bus] replicas = 3` on a 3-node cluster, and clients that fail over.

Against real nats-servers: the test's own 3-node cluster on 127.0.0.1 (`nats_cluster`), or
one server where replicas are refused. Nodes die by SIGKILL, the stream's leader and the node
the client is connected to among them.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from functools import partial

import anyio
import msgspec
import pytest

from bus import subjects
from bus import consumer as consumer_module
from bus.consumer import consume
from bus.errors import BusError, ConfigError
from bus.messages import ScaleTarget
from bus.nats_bus import Bus, Identity, servers
from runtime.broker.cluster import EmbeddedCluster, healthy
from runtime.config import RunConfig, load
from runtime.connect import topology
from runtime.stack.rundir import RunDir
from tests.conftest import bus_settings, patiently, until, until_sync


def every_store() -> list[str]:
    """Every stream the topology makes: streams, KV buckets and the weights object store."""
    return [s.name for s in topology(RunConfig())] + [
        subjects.kv_stream(b) for b in (subjects.BUCKET_POLICY, subjects.BUCKET_ACTORS,
                                        subjects.BUCKET_RUN)] + [
        subjects.object_stream(subjects.BUCKET_WEIGHTS)]


async def connect(url: str, replicas: int) -> Bus:
    return await Bus.connect(bus_settings(url, replicas=replicas), Identity("test", "test-1"))


@pytest.mark.bus
async def test_three_replicas_on_one_server_are_refused_naming_the_fix(nats_server):
    """replicas = 3 against a single server fails at start with what to do, not a JetStream code."""
    bus = await connect(nats_server.url, 3)
    try:
        with pytest.raises(BusError) as caught:
            await bus.ensure_topology(topology(RunConfig()))
    finally:
        await bus.close()
    text = str(caught.value)
    assert "3 replicas" in text and "embedded_nodes = 3" in text
    assert "docker-compose.cluster.yml" in text and "replicas = 1" in text


@pytest.mark.bus
async def test_every_stream_bucket_and_object_store_keeps_three_replicas(nats_cluster):
    """On a cluster, replicas = 3 replicates every stream, KV bucket and the object store,
    also those an earlier start made with one replica."""
    bus = await connect(nats_cluster.url, 1)
    await bus.ensure_topology(topology(RunConfig()))
    await bus.close()
    bus = await connect(nats_cluster.url, 3)
    try:
        await bus.ensure_topology(topology(RunConfig()))
        names = {n.server_name for n in nats_cluster.nodes}

        async def replicated(name: str) -> bool:
            info = await bus.js.stream_info(name)
            assert info.config.num_replicas == 3, name
            peers = {info.cluster.leader} | {p.name for p in info.cluster.replicas or []
                                             if p.current}
            return peers == names

        for name in every_store():
            await until(partial(replicated, name), 30, f"{name}: a leader and 2 current copies")
    finally:
        await bus.close()


async def stream_leader(bus: Bus, stream: str) -> str:
    async def leader() -> str:
        info = await bus.js.stream_info(stream)
        return info.cluster.leader if info.cluster else ""
    return await patiently(leader)


@pytest.mark.bus
async def test_work_survives_killed_nodes_once_each(nats_cluster):
    """Publishing through a kill -9 of the stream's leader, and consuming through a kill of
    the node the client is on, stores every message once and delivers every one."""
    n = 300
    bus = await connect(nats_cluster.url, 3)
    try:
        await bus.ensure_topology(topology(RunConfig()))
        for i in range(n):
            if i == n // 2:
                leader = nats_cluster.node(await stream_leader(bus, subjects.STREAM_TASKS))
                leader.kill()
            await bus.publish(subjects.TASKS, ScaleTarget(kind="t", count=i, requested_at=0.0),
                              msg_id=f"m{i}")
        await anyio.to_thread.run_sync(leader.start)
        stored = Counter(msg.count for _, msg in await patiently(
            lambda: bus.snapshot(subjects.STREAM_TASKS, ScaleTarget)))
        assert stored == Counter(range(n)), "a message was lost or stored twice"

        seen: Counter[int] = Counter()

        async def handle(msg: ScaleTarget, delivery) -> None:
            seen[msg.count] += 1
            if len(seen) == n // 3 and not killed:
                killed.append(nats_cluster.node(await patiently(connected_node(bus))))
                killed[0].kill()

        killed: list = []
        async with anyio.create_task_group() as tg:
            await tg.start(partial(consume, bus, subjects.CONSUMER_TASKS, ScaleTarget, handle,
                                   drain_s=1))
            await until(lambda: len(seen) == n, 90, lambda: f"{len(seen)} of {n} delivered")
            bus.stopping.set()
        assert killed and set(seen) == set(range(n))
        await anyio.to_thread.run_sync(killed[0].start)
        [state] = await patiently(lambda: bus.stream_states([subjects.STREAM_TASKS]))
        assert state.messages == 0, "acked work stayed in the queue"
    finally:
        await bus.close()


def connected_node(bus: Bus):
    """The server name of the node `bus` is connected to now (from its INFO)."""
    async def name() -> str:
        return bus.nc._server_info["server_name"]
    return name


@pytest.mark.unit
def test_replicas_are_one_or_three_and_three_needs_a_cluster(tmp_path, monkeypatch):
    """[bus] replicas takes 1 or 3; 3 on the one-node embedded server is refused with the fix."""
    monkeypatch.delenv("WHET_NATS_URL", raising=False)
    cases = {"replicas = 2": "expected one of [1, 3]",
             "replicas = 3": "embedded_nodes = 3"}
    for text, message in cases.items():
        (tmp_path / "c.toml").write_text(f"[bus]\n{text}\n")
        with pytest.raises(ConfigError, match="bus.replicas") as caught:
            load(tmp_path / "c.toml")
        assert message in str(caught.value)
    (tmp_path / "c.toml").write_text("[bus]\nreplicas = 3\nembedded_nodes = 3\n")
    assert load(tmp_path / "c.toml").bus.replicas == 3
    monkeypatch.setenv("WHET_NATS_URL", "nats://a:4222, nats://b:4222,nats://c:4222")
    (tmp_path / "c.toml").write_text("[bus]\nreplicas = 3\n")
    cfg = load(tmp_path / "c.toml")
    assert servers(cfg.bus.url) == ["nats://a:4222", "nats://b:4222", "nats://c:4222"]


@pytest.mark.bus
async def test_embedded_nodes_three_starts_a_local_cluster(tmp_path):
    """`whet up` with embedded_nodes = 3 starts three routed nodes; a client given their
    URLs keeps working, with three replicas, when the node it is on dies."""
    from runtime.stack.serve import _start_server

    cfg = RunConfig()
    cfg = msgspec.structs.replace(cfg, bus=msgspec.structs.replace(
        cfg.bus, embedded_nodes=3, replicas=3))
    cluster, url = _start_server(cfg, RunDir(tmp_path / "run"), None)
    try:
        assert isinstance(cluster, EmbeddedCluster) and len(servers(url)) == 3
        assert all(healthy(node) for node in cluster.nodes)
        bus = await connect(url, 3)
        try:
            await bus.ensure_topology(topology(cfg))
            nats_cluster_node = cluster.node(await connected_node(bus)())
            nats_cluster_node.kill()
            await bus.kv_put(subjects.BUCKET_RUN, "probe", ScaleTarget(kind="k", count=1,
                                                                        requested_at=0.0))
            got = await patiently(lambda: bus.kv_get(subjects.BUCKET_RUN, "probe", ScaleTarget))
            assert got.count == 1
        finally:
            await bus.close()
    finally:
        cluster.kill()


@pytest.mark.bus
def test_a_killed_meta_leader_is_replaced_and_rejoins(nats_cluster):
    """kill -9 of the JetStream meta leader: the other two elect another, and the restarted
    node, on its own store, rejoins and reports healthy."""
    first = nats_cluster.meta_leader()
    node = nats_cluster.node(first)
    node.kill()
    until_sync(lambda: nats_cluster.meta_leader() not in ("", first), 30, "no new meta leader")
    node.start()
    nats_cluster.wait_ready(30)
    assert len({n.store_dir for n in nats_cluster.nodes}) == 3


@pytest.mark.bus
async def test_review_reads_a_stopped_cluster_runs_stores(tmp_path):
    """`whet review` of a stopped run whose local cluster kept three replicas starts the
    three nodes on their stores for the read, and shows that run's trials."""
    from tests.support.review import RUN_TRIALS, shown, stopped_run, whet

    run = await stopped_run(tmp_path / "runs", RUN_TRIALS, nodes=3)
    out = whet(run, "review", "--per-stratum", "1", stdin="q\n")
    assert out.returncode == 0 and "7 trials in run r-1" in out.stdout, out.stdout + out.stderr
    assert "g9.0" not in shown(out.stdout)


@pytest.mark.bus
async def test_a_consumer_without_a_leader_waits_instead_of_spinning(nats_cluster):
    """While its killed leader is replaced, a consumer's pulls get "no responders" (503); it
    pauses between them (a few a second, not thousands) and takes work once one is elected."""
    bus = await connect(nats_cluster.url, 3)
    seen: list[int] = []

    async def handle(msg: ScaleTarget, delivery) -> None:
        seen.append(msg.count)

    async def consumer_leader() -> str:
        info = await bus.js.consumer_info(subjects.STREAM_TASKS, subjects.CONSUMER_TASKS.durable)
        return info.cluster.leader or ""

    try:
        await bus.ensure_topology(topology(RunConfig()))
        async with anyio.create_task_group() as tg:
            await tg.start(partial(consume, bus, subjects.CONSUMER_TASKS, ScaleTarget, handle,
                                   drain_s=1))
            await bus.publish(subjects.TASKS, ScaleTarget(kind="t", count=0, requested_at=0.0),
                              msg_id="m0")
            await until(lambda: seen == [0], 30)
            leader = await patiently(consumer_leader)
            sent, began = bus.nc.stats["out_msgs"], time.monotonic()
            nats_cluster.node(leader).kill()
            await until(lambda: patiently(consumer_leader), 60)
            pulls, took = bus.nc.stats["out_msgs"] - sent, time.monotonic() - began
            assert pulls < 20 + 3 * took / consumer_module.NO_LEADER_PAUSE_S, (pulls, took)
            await bus.publish(subjects.TASKS, ScaleTarget(kind="t", count=1, requested_at=0.0),
                              msg_id="m1")
            await until(lambda: seen == [0, 1], 60, lambda: f"seen {seen}")
            bus.stopping.set()
    finally:
        await bus.close()


@pytest.mark.stack
async def test_whet_up_on_a_local_cluster_replicates_and_stops_every_node(tmp_path):
    """`whet up` with embedded_nodes = 3 and replicas = 3: the actors come up on the three
    nodes, the streams keep three replicas, and a stop (SIGTERM) ends every node."""
    import signal

    from runtime.broker.embedded import alive
    from runtime.cli import stack_status as status_mod
    from tests.test_stop import stack_ready, start_whet

    proc = start_whet(tmp_path, "embedded_nodes = 3\nreplicas = 3\n")
    try:
        run = tmp_path / "runs" / "latest"
        await stack_ready(proc, run, 90)
        url = (run / "nats.url").read_text().strip()
        assert len(servers(url)) == 3
        pids = [int(f.stem.rsplit("_", 1)[1]) for f in (run / "nats").glob("node*/ports/*.ports")]
        assert len(pids) == 3 and all(alive(p) for p in pids)
        bus = await connect(url, 3)
        try:
            async def probes_live() -> bool:  # a consumer listing may time out at first
                return (await patiently(lambda: status_mod.gather(bus))).live("probe") == 2
            await until(probes_live, 90, "two probe actors live")
            info = await bus.js.stream_info(subjects.STREAM_VERDICTS)
            assert info.config.num_replicas == 3
        finally:
            await bus.close()
        proc.stdout.close()
        os.killpg(proc.pid, signal.SIGTERM)
        assert await anyio.to_thread.run_sync(lambda: proc.wait(timeout=90)) == 0
        await until(lambda: not any(alive(p) for p in pids), 30,
                    "a nats-server node outlived the stack")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
