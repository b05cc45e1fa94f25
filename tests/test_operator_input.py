"""Bad input from an operator, verb by verb: the exact line each case prints and its exit status.

Each case runs the real `whet` CLI in a process, as a user would; nothing is mocked. The
cases a stack or a sandbox needs are in the bus tier, the others in the unit tier.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from bus import subjects
from bus.messages import ScaleTarget
from runtime.config import RunConfig, dump

ROOT = Path(__file__).resolve().parent.parent


def whet(*args: str, cwd: Path = ROOT, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """The `whet` CLI with `args`, run from `cwd`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("WHET_NATS_URL", None)
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], cwd=cwd, env=env,
                          text=True, capture_output=True, timeout=timeout_s)


def one_line(result: subprocess.CompletedProcess) -> str:
    """The single line `result` printed on stderr (the test fails if there were more)."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def stopped_run(tmp_path: Path, cfg: RunConfig = RunConfig(), url: str = "nats://127.0.0.1:1") -> Path:
    """A run folder as `whet up` leaves it, whose server (at `url`) is not running."""
    run = tmp_path / "runs" / "r-1"
    run.mkdir(parents=True)
    (run / "config.resolved.json").write_bytes(dump(cfg))
    (run / "nats.url").write_text(url + "\n")
    return run


SCALE_CASES = [
    (["exectuor=2"], "whet: scale: unknown actor kind 'exectuor'; did you mean 'executor'? known "
     "kinds: evaluator, executor, generator, judge, learner, learner_rank, monitor, sampler"),
    (["executor=-1"], "whet: scale: 'executor=-1': expected KIND=N with N a whole number, e.g. executor=4"),
    (["executor=two"], "whet: scale: 'executor=two': expected KIND=N with N a whole number, e.g. executor=4"),
    (["executor=²"], "whet: scale: 'executor=²': expected KIND=N with N a whole number, e.g. executor=4"),
    (["=2"], "whet: scale: '=2': expected KIND=N with N a whole number, e.g. executor=4"),
    (["executor=65"], "whet: scale: 'executor=65': at most 64 instances of a kind"),
    (["executor=2", "executor=3"], "whet: scale: 'executor' is given twice; give each kind once"),
    (["executor=2", "probe=1"], "whet: scale: unknown actor kind 'probe'; known kinds: evaluator, "
     "executor, generator, judge, learner, learner_rank, monitor, sampler"),
]


@pytest.mark.unit
@pytest.mark.parametrize("args, line", SCALE_CASES, ids=[" ".join(a) for a, _ in SCALE_CASES])
def test_scale_refuses_a_bad_kind_or_count_before_connecting(tmp_path, args, line):
    """A typo in `whet scale` is one line and exit 2, said before the (stopped) server is tried."""
    run = stopped_run(tmp_path)
    result = whet("scale", *args, "--run", str(run), "--wait", "0", timeout_s=8)
    assert (result.returncode, one_line(result)) == (2, line)


@pytest.mark.unit
def test_scale_knows_the_run_configs_own_kinds(tmp_path):
    """A kind the run's config adds (`[actors] target`) is known; its typo is named with it."""
    cfg = msgspec.convert({"actors": {"target": {"probe": "tests.support.probe_actor:run"}}}, RunConfig)
    run = stopped_run(tmp_path, cfg)
    result = whet("scale", "prbe=3", "--run", str(run), "--wait", "0", timeout_s=8)
    assert result.returncode == 2
    assert "unknown actor kind 'prbe'; did you mean 'probe'?" in one_line(result)


@pytest.mark.bus
async def test_scale_without_a_run_folder_writes_nothing_for_an_unknown_kind(bus, nats_server, tmp_path):
    """With only a URL, an unknown kind (none beats on the bus either) leaves KV untouched."""
    result = await anyio.to_thread.run_sync(lambda: whet(
        "scale", "exectuor=2", "--url", nats_server.url, "--wait", "0", cwd=tmp_path))
    assert result.returncode == 2
    assert "unknown actor kind 'exectuor'; did you mean 'executor'?" in result.stderr.splitlines()[-1]
    assert await bus.kv_items(subjects.BUCKET_RUN, ScaleTarget, prefix="scale.") == {}
    fine = await anyio.to_thread.run_sync(lambda: whet(
        "scale", "executor=2", "--url", nats_server.url, "--wait", "0", cwd=tmp_path))
    assert fine.returncode == 0, fine.stderr
    targets = await bus.kv_items(subjects.BUCKET_RUN, ScaleTarget, prefix="scale.")
    assert [(t.kind, t.count) for t in targets.values()] == [("executor", 2)]
