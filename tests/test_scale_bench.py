"""The scale bench (bench/scale/scale.py) still runs: 10 simulated actors, a short window."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.bus


def test_scale_bench_runs_at_ten_actors(tmp_path):
    """Ten real bus clients beat, publish and consume; status sees them; the table is written."""
    out = tmp_path / "scale"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scale" / "scale.py"), "--counts", "10", "--per-process", "5",
         "--window", "2.5", "--warmup", "0.5", "--newcomers", "1", "--supervisor-window", "0.5",
         "--out", str(out), "--log-dir", str(tmp_path / "logs")],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((out.with_suffix(".json")).read_text())
    [row] = result["rows"]
    assert row["processes"] == 2 and row["connections"] >= 10
    assert row["status_ready"] == 10 and row["status_dead"] == 0
    assert row["handled_per_s"] > 0 and row["heartbeats_per_s"] > 0
    assert math.isfinite(row["latency_p50_ms"]) and row["server_rss_mb"] > 0
    assert row["newcomer_first_message_s"] >= row["newcomer_ready_s"] > 0
    [supervised] = result["supervisor"]
    assert supervised["actors"] == 10 and supervised["spawn_s"] > 0
    table = out.with_suffix(".md").read_text()
    assert "| `whet status` read (s) |" in table and "N=10" in table
