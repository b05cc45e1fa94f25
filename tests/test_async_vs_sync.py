"""bench/learning/async_vs_sync: its per-mode summary by hand, and the committed result's
ratios recomputed from the figures it holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.learning.async_vs_sync import summarise

pytestmark = pytest.mark.unit

RESULT = Path(__file__).resolve().parent.parent / "bench" / "learning" / "results" / \
    "async_vs_sync_staleness1.json"


def test_steady_state_counts_from_the_first_update_to_the_last():
    rows = [{"samples_total": 20.0, "wall_s": 100.0, "pass_rate": 0.1},
            {"samples_total": 50.0, "wall_s": 130.0, "pass_rate": 0.5},
            {"samples_total": 80.0, "wall_s": 160.0, "pass_rate": 0.5}]
    out = summarise(rows, target=0.3)
    assert out["samples_per_s"] == pytest.approx(80 / 160)
    assert out["steady_samples_per_s"] == pytest.approx(60 / 60)
    assert out["first_update_wall_s"] == 100.0
    assert out["time_to_pass_rate_s"] == 130.0  # the mean of steps 1-2 first reaches 0.3


def test_one_update_has_no_steady_state():
    out = summarise([{"samples_total": 20.0, "wall_s": 100.0}], target=0.3)
    assert out["steady_samples_per_s"] is None
    assert out["time_to_pass_rate_s"] is None


def test_the_committed_ratios_follow_from_its_figures():
    r = json.loads(RESULT.read_text())
    s, a = r["sync"], r["async"]
    assert s["samples_per_s"] == pytest.approx(s["samples"] / s["wall_s"])
    assert a["samples_per_s"] == pytest.approx(a["samples"] / a["wall_s"])
    assert r["ratio_samples_per_s"] == pytest.approx(a["samples_per_s"] / s["samples_per_s"])
    assert r["ratio_steady_samples_per_s"] == pytest.approx(
        a["steady_samples_per_s"] / s["steady_samples_per_s"])
