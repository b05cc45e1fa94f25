"""bench/vs_trl's report: its statistics by hand, and every committed report recomputed from its seed files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.vs_trl import vs_trl_report as report

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "vs_trl" / "results"


def test_paired_counts_passes_gained_and_lost_and_the_reward_difference():
    """Gains and losses are passes that appear or vanish; the sign test and the mean
    difference with its interval match a hand computation; unscored tasks are left out."""
    before = {"a": [0.1, "fail"], "b": [1.0, "pass"], "c": [0.1, "fail"], "d": [None, "dropped"]}
    after = {"a": [1.0, "pass"], "b": [1.0, "pass"], "c": [0.4, "fail"], "d": [1.0, "pass"]}
    got = report.paired(before, after)
    assert (got["tasks"], got["gained"], got["lost"]) == (3, 1, 0)
    assert got["sign_test_p"] == 1.0  # one discordant pair: 2 * 1/2
    assert got["reward_diff"] == 0.4  # (0.9 + 0 + 0.3) / 3
    assert got["interval95"] == [-0.1186, 0.9186]  # 0.4 -+ 1.96 * stdev 0.4583 / sqrt(3)


def _record(rounds: list[dict], final: float, trl: float) -> dict:
    clocks = {"whole_run": {"cpu_s": 100.0, "wall_s": 80.0}}
    return {"heldout": {"trl": {"t": [trl, "fail"]}, "whetstone": {"t": [final, "fail"]}},
            "trl": {"clocks": clocks},
            "whetstone": {"rounds": rounds, "final_version": 8, "updates": 8,
                          "clocks": {"whole_run": {"cpu_s": 150.0, "wall_s": 90.0}}}}


def test_reach_takes_the_first_round_that_reached_else_the_final_else_none():
    """whetstone's CPU to reach TRL's final reward: the earliest own round at or above it;
    else its whole run when only its final policy reached it (unknown when it first did,
    without rounds between); else not reached."""
    rounds = [{"version": 0, "reward": 0.1, "cpu_s": 20.0}, {"version": 4, "reward": 0.5, "cpu_s": 60.0},
              {"version": 8, "reward": 0.6, "cpu_s": 120.0}]
    hit = report.reach(_record(rounds, final=0.6, trl=0.45))
    assert (hit["whetstone_cpu_s"], hit["ratio"]) == (60.0, 0.6) and "version 4" in hit["by"]
    late = report.reach(_record(rounds[:1], final=0.5, trl=0.45))
    assert late["whetstone_cpu_s"] == 150.0 and "unknown" in late["by"]
    never = report.reach(_record(rounds, final=0.3, trl=0.9))
    assert never["whetstone_cpu_s"] is None and never["by"] == "not reached in 8 updates"


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in RESULTS.glob("*/report.json")))
def test_every_committed_report_recomputes_from_its_seed_files(folder):
    """Each results folder's report.json is exactly what its seed files give."""
    out = subprocess.run([sys.executable, "bench/vs_trl/vs_trl_report.py", str(RESULTS / folder),
                          "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads((RESULTS / folder / "report.json").read_text())["per_seed"]


def test_answers_sort_into_passed_partial_no_test_passed_does_not_compile_and_unscored():
    """A pass, an answer that does not compile (-0.5), partial credit (0.45), two with no test
    passed (0.1: it ran; 0.0) and a dropped attempt without a reward."""
    results = {"a": [1.0, "pass"], "b": [-0.5, "fail"], "c": [0.45, "fail"], "d": [0.1, "fail"],
               "e": [0.0, "fail"], "f": [None, "dropped"]}
    assert report.answer_kinds(results) == {"pass": 1, "partial": 1, "no_test_passed": 2,
                                            "does_not_compile": 1, "unscored": 1}

@pytest.mark.parametrize("path", sorted(RESULTS.glob("*/trl_one_step-seed-*.json")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_one_step_reference_recomputes_from_its_own_and_its_seed_file(path):
    """trl_one_step.py's figures: its reward from its per-task results, its ratios from its
    clocks and the committed seed file it names, on the same task list and held-out tasks."""
    got = json.loads(path.read_text())
    seed = json.loads((ROOT / got["seed_file"]).read_text())
    assert got["same_train_tasks"] and got["train_tasks_sha256"] == seed["train_tasks"]["sha256"]
    assert sorted(got["heldout"]) == sorted(seed["heldout"]["whetstone"])
    assert got["reward"] == report.mean_reward(got["heldout"])
    assert got["whetstone_reward"] == report.mean_reward(seed["heldout"]["whetstone"])
    for clock in ("whole_run", "training"):
        ours = got["clocks"][clock]["cpu_s"]
        assert got["whetstone_over_trl_one_step"][clock] == report.ratio(
            seed["whetstone"]["clocks"][clock]["cpu_s"], ours)
        assert got["trl_two_steps_over_one"][clock] == report.ratio(
            seed["trl"]["clocks"][clock]["cpu_s"], ours)


def test_trl_minibatches_change_trl_config_alone(tmp_path):
    """`--trl-minibatches N` gives TRL's side a config that differs from the seed's in its
    optimizer steps per batch alone; 0 gives TRL the seed's own config."""
    from bench.vs_trl.vs_trl import trl_config

    config = tmp_path / "config.json"
    values = {"learner": {"minibatches": 2, "lr": 3e-5}, "training": {"max_steps": 8}}
    config.write_text(json.dumps(values))
    assert trl_config(config, 0) == config
    trl = json.loads(trl_config(config, 1).read_text())
    assert trl == {**values, "learner": {"minibatches": 1, "lr": 3e-5}}
    assert json.loads(config.read_text()) == values


def test_whetstone_updates_change_whetstone_config_alone_and_keep_trl_s_count(tmp_path):
    """`--whetstone-updates N` gives whetstone's side a config with N updates whose checkpoints
    fall on TRL's update count and keep it to the end; the seed's config is untouched."""
    from bench.vs_trl.vs_trl import checkpoint_interval, whetstone_config

    assert [checkpoint_interval(n, 5) for n in (8, 1, 3, 12)] == [4, 1, 3, 4]
    config = tmp_path / "config.json"
    values = {"learner": {"checkpoint_every": 5, "keep_checkpoints": 2, "lr": 3e-5},
              "training": {"max_steps": 8}}
    config.write_text(json.dumps(values))
    got = json.loads(whetstone_config(config, 12).read_text())
    assert got == {"learner": {"checkpoint_every": 4, "keep_checkpoints": 2, "lr": 3e-5},
                   "training": {"max_steps": 12}}  # kept at the end: steps 8 and 12
    longer = json.loads(whetstone_config(config, 20).read_text())
    assert longer["learner"]["keep_checkpoints"] == 4  # 8, 12, 16, 20
    assert json.loads(config.read_text()) == values


def _longer(at_reward: float, final: float, trl: float, checkpoint: str = "step00000008") -> dict:
    """A seed record whose whetstone side trained 12 updates against TRL's 8."""
    record = _record([], final=at_reward, trl=trl)
    record["heldout"]["whetstone_final"] = {"t": [final, "fail"]}
    record["whetstone"].update(final_version=12, updates=12, at_trl_updates={
        "updates": 8, "checkpoint": checkpoint, "whole_run_cpu_s": 110.0})
    return record


def test_reach_of_a_longer_whetstone_run_takes_its_policy_at_trl_s_count_first():
    """With whetstone trained past TRL's count, its policy at TRL's count reaching TRL's final
    reward is charged that policy's whole-run CPU; else the final policy its whole run; else
    not reached in its own updates."""
    early = report.reach(_longer(at_reward=0.5, final=0.6, trl=0.45))
    assert (early["whetstone_cpu_s"], early["ratio"]) == (110.0, 1.1) and "version 8" in early["by"]
    late = report.reach(_longer(at_reward=0.4, final=0.5, trl=0.45))
    assert late["whetstone_cpu_s"] == 150.0 and late["intermediate_rounds"] == [8]
    never = report.reach(_longer(at_reward=0.4, final=0.4, trl=0.45))
    assert never["by"] == "not reached in 12 updates"


def test_checks_of_a_longer_run_count_whetstone_s_own_updates_and_its_compared_checkpoint():
    """Updates and samples are checked against each side's own count, and the compared
    whetstone policy must be TRL's count's checkpoint."""
    def record(checkpoint: str) -> dict:
        r = _longer(0.5, 0.6, 0.45, checkpoint)
        r.update(settings={"updates": 8, "whetstone_updates": 12, "batch_size": 32},
                 train_tasks={"sha256": "h", "count": 2},
                 heldout_tasks={"same_for_every_policy": True})
        r["trl"].update(tasks={"sha256": "h"}, updates=8, samples={"consumed": 256})
        r["whetstone"].update(pool={"a": 2}, trained_outside_list=[],
                              model_checkpoint="step00000012", samples={"consumed": 384})
        return r

    assert all(report.checks(record("step00000008")).values())
    assert report.checks(record("step00000012")) == {
        **report.checks(record("step00000008")), "whetstone_compared_at_trl_updates": False}


def test_between_seeds_takes_each_seed_as_one_unit():
    """Per seed the whetstone - TRL mean reward and passes; their mean with a t interval over
    seeds (4.303 for three), none for one seed."""
    def seed(whet: list, trl: list) -> dict:
        return {"heldout": {"whetstone": {f"t{i}": v for i, v in enumerate(whet)},
                            "trl": {f"t{i}": v for i, v in enumerate(trl)}}}

    records = [seed([[1.0, "pass"], [0.1, "fail"]], [[0.1, "fail"], [0.1, "fail"]]),   # +0.45, +1
               seed([[0.1, "fail"], [0.1, "fail"]], [[0.1, "fail"], [0.1, "fail"]]),   # 0, 0
               seed([[0.1, "fail"], [-0.5, "fail"]], [[1.0, "pass"], [0.1, "fail"]])]  # -0.75, -1
    got = report.between_seeds(records)
    assert got["reward_diff"] == [0.45, 0.0, -0.75] and got["pass_diff"] == [1, 0, -1]
    assert got["mean_reward_diff"] == -0.1
    half = 4.303 * 0.6062 / 3 ** 0.5  # stdev of the three differences: 0.6062
    assert abs(got["interval95"][1] - (-0.1 + half)) < 1e-3
    assert report.between_seeds(records[:1])["interval95"] is None


def test_by_stratum_splits_each_policy_by_domain_and_the_rung_in_the_task_id():
    heldout = {"initial": {"1:ds/v1-L0-a": [0.1, "fail"], "1:ds/v1-L1-b": [-0.5, "fail"],
                           "2:so/v1-L0-c": [1.0, "pass"], "2:he/HumanEval-3": [0.0, "fail"]},
               "trl": {"1:ds/v1-L0-a": [1.0, "pass"], "1:ds/v1-L1-b": [0.3, "fail"],
                       "2:so/v1-L0-c": [1.0, "pass"], "2:he/HumanEval-3": [1.0, "pass"]},
               "whetstone": {"1:ds/v1-L0-a": [0.2, "fail"], "1:ds/v1-L1-b": [0.5, "fail"],
                             "2:so/v1-L0-c": [0.9, "fail"], "2:he/HumanEval-3": [0.0, "fail"]}}
    got = report.by_stratum(heldout)
    assert list(got) == ["ds L0", "ds L1", "he", "so L0"]
    assert got["ds L1"] == {"tasks": 1, "initial": {"reward": -0.5, "passes": 0},
                            "trl": {"reward": 0.3, "passes": 0},
                            "whetstone": {"reward": 0.5, "passes": 0}}
    assert got["so L0"]["trl"]["passes"] == 1 and got["so L0"]["whetstone"]["passes"] == 0
