"""The main job's progress record: CSV rows per step and evaluation, and when a run stops."""

from __future__ import annotations

import csv

from envs.config import EvaluatorConfig
from runtime.config import ActorsConfig, RunConfig, TrainingConfig
from runtime.progress import Progress
from runtime.rundir import RunDir


def progress(tmp_path, evaluators: int) -> Progress:
    cfg = RunConfig(training=TrainingConfig(max_steps=4),
                    actors=ActorsConfig(count={"learner": 1, "evaluator": evaluators}),
                    evaluator=EvaluatorConfig(every_versions=2))
    return Progress(cfg, RunDir(tmp_path), lambda: [])


def test_without_an_evaluator_the_run_stops_at_max_steps(tmp_path):
    p = progress(tmp_path, evaluators=0)
    for step in (1, 2, 3):
        p.on_step({"step": step, "policy_version": step, "mean_reward": 0.1 * step})
        assert not p.done
    p.on_step({"step": 4, "policy_version": 4, "mean_reward": 0.4})
    assert p.done
    with (tmp_path / "metrics" / "train.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == ["1", "2", "3", "4"] and rows[3]["mean_reward"] == "0.4"


def test_with_an_evaluator_the_run_waits_for_the_round_of_its_last_version(tmp_path):
    """Version 4 is due a round (every 2): max_steps alone does not stop the run; the
    round's report does, and lands in eval.csv with its round."""
    p = progress(tmp_path, evaluators=1)
    p.on_eval({"version": 2, "policy_version": 2, "round": 2, "overall": 0.25,
               "attempts": {"python": 4}, "trained": {"python": 0.25}, "complete": True})
    p.on_step({"step": 4, "policy_version": 4})
    assert not p.done
    p.on_eval({"version": 4, "policy_version": 4, "round": 4, "overall": 0.5,
               "attempts": {"python": 4}, "trained": {"python": 0.5}, "complete": True})
    assert p.done
    p.on_step({"step": 5, "policy_version": 5})  # not due a round: 4's is its last
    assert p.done
    with (tmp_path / "metrics" / "eval.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["round"], r["overall"], r["attempts"]) for r in rows] == [
        ("2", "0.25", "4"), ("4", "0.5", "4")]
