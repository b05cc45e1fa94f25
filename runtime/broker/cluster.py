"""A local NATS cluster: three `nats-server` processes on 127.0.0.1, routed to each other.

Consumes a store directory (one subfolder per node), the node count and the settings of
`runtime.broker.embedded.EmbeddedServer`; produces a running JetStream cluster and its URLs, comma
separated (what `[bus] url` and `WHET_NATS_URL` take). `whet up` starts one with
`[bus] embedded_nodes = 3` so streams with `[bus] replicas = 3` can run on one machine
without Docker; the cluster chaos test kill -9s its nodes one at a time. It creates no
streams (`bus.nats_bus.Bus.ensure_topology` does) and does not pick which node to kill.

Every node keeps its client and route ports across a restart, and its own store, so a
restarted node rejoins the cluster and catches up from the others.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

from bus.errors import RunError
from runtime.broker.embedded import SYNC_INTERVAL, EmbeddedServer

CLUSTER_NAME = "whet"


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free on 127.0.0.1 right now (held open together while picked)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _cluster_block(name: str, route_port: int, route_ports: list[int]) -> str:
    routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in route_ports)
    return (f"cluster {{\n  name: {name}\n  listen: 127.0.0.1:{route_port}\n"
            f"  routes: [{routes}]\n}}\n")


class EmbeddedCluster:
    """`nodes` nats-servers in one cluster; `start()` brings them all up, `node(i).kill()`
    and `node(i).start()` crash and restart one."""

    def __init__(self, store_dir: Path, nodes: int = 3, extra_config: str = "",
                 max_file_store_mb: int = 0, die_with_parent: bool = False,
                 sync_interval: str = SYNC_INTERVAL) -> None:
        if nodes < 3:
            raise RunError(f"a JetStream cluster needs at least 3 nodes for a quorum, got {nodes}")
        ports = free_ports(2 * nodes)
        client, route = ports[:nodes], ports[nodes:]
        self.nodes = [
            EmbeddedServer(Path(store_dir) / f"node{i}", port=client[i],
                           extra_config=_cluster_block(CLUSTER_NAME, route[i], route) + extra_config,
                           max_file_store_mb=max_file_store_mb, die_with_parent=die_with_parent,
                           sync_interval=sync_interval, monitor=True, server_name=f"whet_n{i}")
            for i in range(nodes)]

    @property
    def url(self) -> str:
        """Every node's URL, comma separated: a client fails over between them."""
        return ",".join(n.url for n in self.nodes)

    @property
    def pid(self) -> int | None:
        return self.nodes[0].pid

    @property
    def pids(self) -> list[int]:
        return [pid for n in self.nodes for pid in n.pids]

    def node(self, name: str) -> EmbeddedServer:
        """The node whose server name is `name` (as JetStream names stream leaders)."""
        for n in self.nodes:
            if n.server_name == name:
                return n
        raise KeyError(f"no node named {name!r} in {[n.server_name for n in self.nodes]}")

    def start(self, timeout_s: float = 60.0) -> str:
        """Start every node and wait until JetStream has a meta leader; returns the URLs."""
        for n in self.nodes:
            n.start(timeout_s)
        self.wait_ready(timeout_s)
        return self.url

    def wait_ready(self, timeout_s: float = 60.0, nodes: list[EmbeddedServer] | None = None) -> None:
        """Return once each of `nodes` (default all) reports JetStream healthy: in contact
        with a meta leader and current with its streams."""
        deadline = time.monotonic() + timeout_s
        for n in nodes or self.nodes:
            while not healthy(n):
                if time.monotonic() > deadline:
                    raise RunError(f"NATS node {n.server_name} did not report JetStream healthy "
                                   f"within {timeout_s:.0f} s; see {n.store_dir / 'nats-server.log'}")
                time.sleep(0.1)

    def stop(self, timeout_s: float = 15.0) -> None:
        for n in self.nodes:
            n.stop(timeout_s)

    def kill(self) -> None:
        for n in self.nodes:
            n.kill()

    def meta_leader(self) -> str:
        """Server name of the JetStream meta leader, as a live node sees it ('' if none)."""
        for n in self.nodes:
            jsz = monitoring(n, "/jsz")
            leader = (jsz or {}).get("meta_cluster", {}).get("leader", "")
            if leader:
                return leader
        return ""


def stored_nodes(store_dir: Path) -> int:
    """How many nodes of a local cluster left their stores under `store_dir` (0: none)."""
    return sum(1 for d in Path(store_dir).glob("node*") if (d / "jetstream").is_dir())


def monitoring(node: EmbeddedServer, path: str) -> dict | None:
    """A monitoring endpoint's JSON from a running node; None if it does not answer."""
    if not node.proc or node.proc.poll() is not None or not node.monitoring_url:
        return None
    try:
        with urllib.request.urlopen(node.monitoring_url + path, timeout=2) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        return None


def healthy(node: EmbeddedServer) -> bool:
    """True when the node's /healthz says JetStream is in contact with the cluster."""
    answer = monitoring(node, "/healthz")
    return bool(answer) and answer.get("status") == "ok"
