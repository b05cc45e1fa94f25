"""A supervisor that dies leaves no file saying the stack runs, and its cause in one line.

A supervisor killed before it could clean up (kill -9) is recognised by `whet status`,
`whet down` and a detached `whet up` from its pid file's identity, and its stale files are
removed with one line; a supervisor that stopped on an error removes them itself and leaves
the exception's last line, which the terminal and `whet status` print in full. A full disk
under the run folder is not such an error: the supervisor says so and keeps serving. Each
stack is a real `whet up` process against the test's server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from runtime.stack import pidfile
from tests.conftest import ROOT, until_sync
from tests.test_runtime import PROBE



def whet(*args: str, cwd: Path = ROOT, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """The `whet` CLI with `args` (the run's own URL, not the environment's)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("WHET_NATS_URL", None)
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], cwd=cwd, env=env,
                          text=True, capture_output=True, timeout=timeout_s)


def config(tmp_path: Path, url: str, runs: Path, body: str, bus_text: str = "") -> Path:
    """A stack config on the test's server with its run folders under `runs`."""
    path = tmp_path / "stack.toml"
    path.write_text(f'[run]\nname = "t"\nruns_dir = "{runs}"\n'
                    f'[bus]\nurl = "{url}"\nack_wait_s = 3.0\n{bus_text}\n' + body)
    return path


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MB filesystem for the run folders, unmounted after."""
    runs = tmp_path / "runs"
    runs.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(runs)], check=True)
    yield runs
    subprocess.run(["umount", "-l", str(runs)], check=False)


def fill(folder: Path) -> None:
    """Write to a file under `folder` until its filesystem is full."""
    with open(folder / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


@pytest.mark.stack
def test_a_supervisor_killed_after_ready_is_stale_to_status_and_down(tmp_path, nats_server):
    """kill -9 of a detached stack's supervisor: `whet status` says its supervisor.pid was
    stale, removes it and `ready` and exits 1; `whet down` then finds nothing running.
    (Before, `whet status` read the server as if the stack ran and left both files.)"""
    cfg = config(tmp_path, nats_server.url, tmp_path / "runs", PROBE.format(n=1))
    up = whet("up", "-d", "--config", str(cfg))
    assert up.returncode == 0, up.stderr
    run = (tmp_path / "runs" / "latest").resolve()
    pid = pidfile.holder(run / "supervisor.pid", run.name).record.pid
    os.kill(pid, signal.SIGKILL)
    until_sync(lambda: pidfile.start_time(pid) is None, 30, "the killed supervisor gone")
    assert (run / "supervisor.pid").exists() and (run / "ready").exists()

    status = whet("status", "--run", str(run))
    assert (status.returncode, status.stdout) == (
        1, f"run {run.name} is not running: its supervisor.pid was stale (pid {pid} is not "
           "running); removed it and ready\n"), status.stderr
    assert not (run / "supervisor.pid").exists() and not (run / "ready").exists()
    down = whet("down", "--run", str(run))
    assert (down.returncode, down.stdout) == (0, f"run {run.name} is not running\n"), down.stderr


@pytest.mark.stack
def test_a_detached_stack_that_stops_before_ready_gives_its_cause(tmp_path, nats_server):
    """A stream cap the server cannot reserve stops the detached supervisor before it is
    ready: `whet up -d` exits 1 with the supervisor's own line, not 'see stack.out'."""
    cfg = config(tmp_path, nats_server.url, tmp_path / "runs", PROBE.format(n=1),
                 "verdicts_max_mb = 100000000")
    up = whet("up", "-d", "--config", str(cfg))
    run = (tmp_path / "runs" / "latest").resolve()
    assert up.returncode == 1, up.stderr
    assert up.stderr.startswith("whet: the stack stopped before it was ready: the NATS server "
                                "cannot reserve "), up.stderr
    assert "for stream WHET_VERDICTS ([bus] verdicts_max_mb)" in up.stderr
    assert up.stderr.endswith(f"; see {run / 'stack.out'}\n") and up.stderr.count("\n") == 1
    assert not (run / "supervisor.pid").exists() and not (run / "ready").exists()


@pytest.mark.stack
def test_a_full_disk_under_the_run_folder_never_kills_the_supervisor(tmp_path, nats_server,
                                                                     small_disk):
    """The run folder's disk fills while the stack runs: the supervisor's metrics and plot
    writes are refused, it says so once (`progress.file_unwritable`) and keeps serving; when
    space returns it says how many writes were lost (`progress.file_writable`); `whet down`
    then stops it cleanly, leaving no supervisor.pid or `ready`. (Before: the supervisor died
    on a plot write, taking the stack with it.)"""
    # A learner kind (the probe runs it) makes the supervisor write metrics/progress.csv.
    body = PROBE.format(n=1).replace("probe = 1", "probe = 1\nlearner = 1").replace(
        'probe = "tests', 'learner = "tests.support.probe_actor:run"\nprobe = "tests')
    cfg = config(tmp_path, nats_server.url, small_disk, body)
    out = open(tmp_path / "stack.out", "ab")  # off the small disk: the terminal stays readable
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("WHET_NATS_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "runtime.cli", "up", "--config", str(cfg)],
                            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)

    def said(event: str) -> Callable[[], bool]:
        def check() -> bool:
            assert proc.poll() is None, (tmp_path / "stack.out").read_text()[-3000:]
            return f'"event": "{event}"' in (tmp_path / "stack.out").read_text()
        return check

    try:
        def ready() -> bool:
            assert proc.poll() is None, (tmp_path / "stack.out").read_text()[-3000:]
            return (small_disk / "latest" / "ready").exists()

        until_sync(ready, 60, "the stack's ready file")
        run = (small_disk / "latest").resolve()
        until_sync((run / "metrics" / "progress.csv").exists, 30, "the progress CSV")
        fill(small_disk)
        until_sync(said("progress.file_unwritable"), 90, "the unwritable metrics said once")
        (small_disk / "filler").unlink()  # space is back
        until_sync(said("progress.file_writable"), 90, "the metrics written again")
        down = whet("down", "--run", str(run))
        assert down.returncode == 0, down.stderr
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (run / "supervisor.pid").exists() and not (run / "ready").exists()
    assert "Traceback" not in (tmp_path / "stack.out").read_text()
