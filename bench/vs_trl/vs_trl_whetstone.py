"""The whetstone side of bench/vs_trl/vs_trl.py: what a finished `whet up` run measured itself.

Consumes a run directory (`metrics/*.csv`, the actors' event logs, and `model/`, which the
learner writes at its stop); produces the per-step curve (the stack's own CPU and wall
stamps), its evaluator's held-out rounds with the stack's CPU when each was reported, the
sandboxed jobs' CPU (from the heartbeats), training-only clocks, the samples its updates
consumed, the pool the sampler gated, and any training task judged that the task list
does not name. The bench runs `whet up` itself (`bench.vs_trl.clock`); this starts nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.learning.learning_run import read_csv


def _num(value: str | None) -> float | None:
    return None if value in ("", None) else float(value)


def events(run_dir: Path, prefix: str) -> list[dict]:
    """Every event in the logs of the actors whose log files start with `prefix`."""
    out = []
    for log in sorted((run_dir / "logs").glob(f"{prefix}*.jsonl")):
        out += [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return out


def training_clocks(progress: list[dict[str, str]], last: dict) -> dict:
    """Training-only clocks: from when every actor was ready to the last step's stamp.
    progress.csv has a row every 30 s, so that moment lies between the last row before
    every actor was ready and the first row after; the clocks count from the earlier row
    (at most a row more than training: kind to TRL) and `shorter_by_at_most` says how much
    counting from the later row would take off."""
    ready = next((i for i, r in enumerate(progress)
                  if int(r["expected"]) and int(r["ready"]) >= int(r["expected"])), 0)
    early, late = progress[max(ready - 1, 0)], progress[ready]
    span = lambda row, k: round(last[k] - float(row[k]), 1)  # noqa: E731
    return {"wall_s": span(early, "wall_s"), "cpu_s": span(early, "cpu_s"),
            "shorter_by_at_most": {k: round(span(early, k) - max(span(late, k), 0.0), 1)
                                   for k in ("wall_s", "cpu_s")}}


def consumed(run_dir: Path) -> dict:
    """Samples the learner's steps took: trained on, and left out by reason (no signal:
    equal rewards in the group; stale; dropped), from its `learner.step_completed` events."""
    steps = [e["fields"] for e in events(run_dir, "learner") if e["event"] == "learner.step_completed"]
    left: dict[str, int] = {}
    for f in steps:
        for reason, ids in f.get("left_out", {}).items():
            left[reason] = left.get(reason, 0) + len(ids)
    trained = sum(len(f.get("trained", [])) for f in steps)
    return {"consumed": trained + sum(left.values()), "trained": trained, "left_out": left}


def whetstone_side(run_dir: Path, allowed: set[str], heldout: set[str]) -> dict:
    """The run's own record; `allowed` is the task list, `heldout` the evaluated tasks.
    `model_checkpoint` names the checkpoint the learner wrote as `model/` at its stop."""
    metrics = run_dir / "metrics"
    train, rounds = read_csv(metrics / "train.csv"), read_csv(metrics / "eval.csv")
    progress = read_csv(metrics / "progress.csv")
    curve = [{"step": int(r["step"]), "policy_version": int(r["policy_version"]),
              "samples": int(r["samples_total"]), "cpu_s": _num(r["cpu_s"]),
              "wall_s": _num(r["wall_s"]), "train_reward": _num(r["mean_reward"]),
              "pass_rate": _num(r["pass_rate"]), "staleness_mean": _num(r["staleness_mean"])}
             for r in train]
    last = curve[-1] if curve else {"step": 0, "policy_version": 0, "samples": 0}
    intake = [e["fields"] for e in events(run_dir, "sampler") if e["event"] == "intake.completed"]
    exported = [e["fields"]["checkpoint"] for e in events(run_dir, "learner")
                if e["event"] == "learner.model_exported"]
    judged = {e["fields"]["task_id"] for e in events(run_dir, "judge")
              if e["event"] in ("judge.judged", "judge.hack_suspected", "judge.dropped")}
    return {
        "run_dir": str(run_dir), "updates": last["step"], "final_version": last["policy_version"],
        "samples": consumed(run_dir), "curve": curve,
        "rounds": [{"version": int(r["policy_version"]), "overall": _num(r["overall"]),
                    "reward": _num(r["reward"]), "tasks": int(r["tasks"] or 0),
                    "cpu_s": _num(r["cpu_s"]), "wall_s": _num(r["wall_s"])} for r in rounds],
        "sandbox_cpu_s": max((float(r["sandbox_cpu_s"] or 0) for r in progress), default=0.0),
        "training": training_clocks(progress, last) if progress and curve else None,
        "pool": intake[-1].get("by_domain") if intake else None,
        "trained_outside_list": sorted(judged - allowed - heldout),
        "model_checkpoint": exported[-1] if exported else None,
    }
