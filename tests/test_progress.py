"""The main job's progress record: CSV rows per step and evaluation, and when a run stops."""

from __future__ import annotations

import csv

from bus.messages import EvalRound, HeldoutScore
from envs.config import EvaluatorConfig
from runtime.config import ActorsConfig, RunConfig, TrainingConfig
from runtime.progress import Progress
from runtime.render_round import eval_row, round_brief, round_line
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


def result(version: int, rate: float, gained: int = 0, lost: int = 0,
           p_value: float = 1.0) -> EvalRound:
    score = HeldoutScore(rate=rate, low=rate / 2, high=min(1.0, rate * 2), tasks=4, attempts=4,
                         paired=4, gained=gained, lost=lost, p_value=p_value)
    return EvalRound(round=version, version=version, overall=score, trained=score,
                     baseline_version=0)


def test_with_an_evaluator_the_run_waits_for_the_round_of_its_last_version(tmp_path):
    """Version 4 is due a round (every 2): max_steps alone does not stop the run; the
    round's typed result does, and lands in eval.csv with its round, interval and paired
    comparison; a result seen again (a renewed watch) is not written twice."""
    p = progress(tmp_path, evaluators=1)
    assert p.on_round(result(2, 0.25))
    p.on_step({"step": 4, "policy_version": 4})
    assert not p.done
    assert p.on_round(result(4, 0.5, gained=2, p_value=0.5))
    assert not p.on_round(result(4, 0.5, gained=2, p_value=0.5))
    assert p.done
    p.on_step({"step": 5, "policy_version": 5})  # not due a round: 4's is its last
    assert p.done
    assert "held-out 0.500 [0.25, 1.00] vs v0: +2/-0 of 4 (p=0.5)" in p.line()
    with (tmp_path / "metrics" / "eval.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["round"], r["overall"], r["overall_low"], r["attempts"], r["gained"],
             r["p_value"], r["trained"]) for r in rows] == [
        ("2", "0.25", "0.125", "4", "0", "1.0", "0.25"), ("4", "0.5", "0.25", "4", "2", "0.5", "0.5")]


def test_a_round_reads_as_rate_interval_and_change_since_the_baseline():
    """The status line names the version, the rate with its interval over tasks, and the
    paired change (+gained/-lost of paired, p) overall, on trained and on transfer domains."""
    trained = HeldoutScore(rate=0.6, low=0.3127, high=0.8318, tasks=10, attempts=20, paired=10,
                           gained=3, lost=0, p_value=0.25, delta=0.3)
    transfer = HeldoutScore(rate=0.2, low=0.0567, high=0.5098, tasks=10, attempts=20,
                            paired=10, gained=1, lost=1, p_value=1.0)
    overall = HeldoutScore(rate=0.4, low=0.2188, high=0.6134, tasks=20, attempts=40, paired=20,
                           gained=4, lost=1, p_value=0.375, delta=0.15)
    r = EvalRound(round=12, version=12, overall=overall, trained=trained, transfer=transfer,
                  baseline_version=0, samples_per_task=2, complete=False)
    assert round_line(r) == (
        "v12 (round 12, incomplete); overall 0.400 [0.22, 0.61] on 20 tasks x2; "
        "vs v0: +4/-1 of 20 (p=0.375); trained 0.600 [0.31, 0.83] vs v0: +3/-0 of 10 (p=0.25); "
        "transfer 0.200 [0.06, 0.51] vs v0: +1/-1 of 10 (p=1)")
    assert round_brief(r) == "held-out 0.600 [0.31, 0.83] vs v0: +3/-0 of 10 (p=0.25)"
    assert round_brief(None) == "held-out -"
    row = eval_row(r)
    assert (row["trained_gained"], row["trained_p_value"], row["transfer_high"]) == (3, 0.25, 0.5098)
