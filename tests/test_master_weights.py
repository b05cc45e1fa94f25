"""bench/learning/master_weights.py: its weight-space figures and its paired comparison by
hand, and the committed result recomputed from its own evaluation files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.learning import master_weights as bench

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.unit

RESULT = ROOT / "bench" / "learning" / "results" / "master_weights"


def test_changes_measure_how_much_of_the_master_the_rounding_holds():
    """Version 0 is the bf16 rounding of the initial weights; a module that moved half the
    master's way along it has projection 0.5 and cosine 1; a norm weight that did not move
    has projection 0 and no cosine."""
    base = {"layer.weight": torch.tensor([1.0, 2.0, 4.0]), "norm.weight": torch.tensor([1.0])}
    master = {"layer.weight": torch.tensor([1.5, 2.5, 4.0]), "norm.weight": torch.tensor([1.25])}
    module = {"layer.weight": torch.tensor([1.25, 2.25, 4.0]), "norm.weight": torch.tensor([1.0])}
    got = bench.changes(base, master, module)
    assert got["linear"]["projection"] == 0.5 and got["linear"]["cosine"] == 1.0
    assert got["linear"]["share_moved_in_module"] == round(2 / 3, 4)
    assert got["norm"]["projection"] == 0.0 and got["norm"]["cosine"] is None


def test_compare_counts_passes_gained_and_lost_per_domain():
    """Passes the master has and the module lacks are gains, the reverse losses; the sign
    test and the per-domain counts match a hand count."""
    def task(domain, outcome, reward):
        return {"domain": domain, "outcome": outcome, "reward": reward}

    module = {"a": task("data", "pass", 1.0), "b": task("data", "pass", 1.0),
              "c": task("structured", "fail", 0.1), "d": task("structured", "pass", 1.0)}
    master = {"a": task("data", "fail", 0.1), "b": task("data", "pass", 1.0),
              "c": task("structured", "pass", 1.0), "d": task("structured", "fail", -0.5)}
    got = bench.compare(module, master)
    assert got["passes"] == {"module": 3, "master": 2}
    assert (got["master_gained"], got["master_lost"]) == (1, 2)
    assert got["sign_test_p"] == 1.0
    assert got["by_domain"]["data"] == {"module": 2, "master": 1, "tasks": 2}
    assert got["mean_reward"] == {"module": 0.775, "master": 0.4}


def test_the_committed_result_recomputes_from_its_evaluations():
    """`validation` in master_weights.json is `compare` of the two committed evaluations."""
    summary = json.loads((RESULT / "master_weights.json").read_text())
    results = {name: json.loads((RESULT / f"eval_{name}.json").read_text())["results"]
               for name in ("module", "master")}
    assert summary["validation"] == bench.compare(results["module"], results["master"])
