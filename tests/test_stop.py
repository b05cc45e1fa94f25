"""Stopping leaves nothing behind: every way a foreground `whet up` is stopped also stops its
embedded nats-server, even when nobody reads its output any more.

`make run 2>&1 | tee run.log` then Ctrl-C: the terminal sends SIGINT to the foreground
group (whet, its actors, tee), tee dies, and whet's stderr becomes a pipe without a reader.
The embedded server runs in a session of its own (so the actors can drain through it), so
only whet can stop it. Each test stages exactly that, with the probe actor.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from bus.nats_bus import Bus, Identity
from runtime.broker.embedded import alive
from runtime.cli import stack_status as status_mod
from tests.conftest import ROOT, bus_settings, until

pytestmark = pytest.mark.stack

CONFIG = """
[run]
name = "stop"
runs_dir = "{runs}"
[actors.count]
probe = 2
[actors.target]
probe = "tests.support.probe_actor:run"
[supervisor]
heartbeat_s = 0.5
drain_s = 3
[monitor]
prometheus_port = 0
trials_max_mb = 16
[bus]
work_max_mb = 16
verdicts_max_mb = 16
{bus}"""
"""Small stream caps: the server refuses caps its disk cannot hold (75% of the free disk),
and a probe stack writes little; a full shared /tmp must not fail these tests."""


def start_whet(tmp_path: Path, bus: str = "") -> subprocess.Popen:
    """`whet up` on its own embedded server, in a process group of its own (as a shell
    starts a pipeline), its output into a pipe this test holds the reading end of. `bus`
    holds more lines of the config's [bus] table."""
    config = tmp_path / "stop.toml"
    config.write_text(CONFIG.format(runs=tmp_path / "runs", bus=bus))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("WHET_NATS_URL", None)
    return subprocess.Popen([sys.executable, "-m", "runtime.cli", "up", "--config", str(config)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


def server_pid(run: Path) -> int:
    """The embedded server's pid, from the ports file it keeps while it runs."""
    (ports,) = (run / "nats" / "ports").glob("*.ports")
    return int(ports.stem.rsplit("_", 1)[1])


async def stack_ready(proc: subprocess.Popen, run: Path, deadline_s: float) -> None:
    """Wait for the run's ready file; if `whet up` exits first, fail with what it printed."""
    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"whet up exited with {proc.returncode} before it was ready:\n"
                                 + proc.stdout.read().decode(errors="replace"))
        return (run / "ready").exists()

    await until(ready, deadline_s, "the stack's ready file")


async def probes_ready(proc: subprocess.Popen, run: Path, deadline_s: float = 60.0) -> None:
    with anyio.fail_after(deadline_s):
        await stack_ready(proc, run, deadline_s)
        bus = await Bus.connect(bus_settings((run / "nats.url").read_text().strip()),
                                Identity("test", "test-1"))
        try:
            async def two_probes_live() -> bool:
                return (await status_mod.gather(bus)).live("probe") >= 2

            await until(two_probes_live, deadline_s, "2 probes live")
        finally:
            await bus.close()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda s: signal.Signals(s).name)
async def test_a_stop_with_the_output_pipe_gone_stops_the_embedded_server(tmp_path, signum):
    """SIGINT (Ctrl-C of a pipe into tee), SIGTERM and SIGHUP to the foreground group, with
    nobody reading whet's output: whet exits 0 and its nats-server is gone."""
    proc = start_whet(tmp_path)
    try:
        run = tmp_path / "runs" / "latest"
        await probes_ready(proc, run)
        server = server_pid(run)
        assert alive(server)
        proc.stdout.close()  # tee died with the Ctrl-C
        os.killpg(proc.pid, signum)
        assert await anyio.to_thread.run_sync(lambda: proc.wait(timeout=60)) == 0
        await until(lambda: not alive(server), 20, "nats-server outlived the stack")
        events = (run / "logs" / "supervisor.jsonl").read_text()
        assert '"stack.stopped"' in events and '"nats.stopped"' in events
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
