"""Unit tests of the main job's summary (bench/learning/learning_run.py) on fabricated
per-task results: no run here."""

from __future__ import annotations

import pytest

from bench.learning import learning_run

pytestmark = pytest.mark.unit


def test_paired_counts_passes_either_way_and_the_sign_test_on_trained_domains_only():
    """Passes at both versions, their ratio and the exact sign test of gained against lost;
    trained_only keeps the tasks of the named environments."""
    before = {f"data_scripts/t{i}": (0.0, "pass" if i < 2 else "fail") for i in range(10)}
    before |= {"humaneval/h0": (1.0, "pass")}
    after = {f"data_scripts/t{i}": (1.0, "pass" if i < 9 else "fail") for i in range(10)}
    after |= {"humaneval/h0": (0.0, "fail")}
    every = learning_run.paired(before, after)
    assert (every["passes_before"], every["passes_after"], every["passes_gained"],
            every["passes_lost"]) == (3, 9, 7, 1)
    trained = learning_run.paired(*(learning_run.trained_only(r, {"data_scripts"})
                                    for r in (before, after)))
    assert trained["tasks"] == 10 and trained["pass_ratio"] == 4.5
    assert (trained["passes_gained"], trained["passes_lost"]) == (7, 0)
    assert trained["sign_test_p"] == pytest.approx(2 / 2 ** 7)
