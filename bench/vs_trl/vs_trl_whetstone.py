"""The whetstone side of bench/vs_trl/vs_trl.py: run `whet up` within a CPU budget, or read a run.

Consumes a run config and a CPU budget (`run_whetstone`: `whet up` in a child process,
stopped by SIGINT, `whet down`'s graceful path, once the stack's CPU seconds would pass the
budget by the next step), or a finished run directory (`whetstone_side`: `metrics/train.csv`
and `metrics/eval.csv`, or the two CSVs themselves as `bench/learning/results/main_job/` keeps them,
and the evaluator's events when `logs/` is there); produces the curves, the held-out
rounds with the CPU seconds at which each version existed, the sandbox CPU the run's jobs
used (from the `sandbox.finished` events), and the final policy as a model folder
(`export_final`, from the learner's newest checkpoint) for the bench to evaluate on the
same path as TRL's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.learning.learning_run import heldout_by_version, read_csv

ROOT = Path(__file__).resolve().parents[2]


def run_whetstone(cfg, budget_s: float, work: Path) -> Path:
    """`whet up` on `cfg` in a child process; SIGINT once its CPU would pass the budget."""
    from runtime.config import dump

    config = work / "whetstone.json"
    config.write_bytes(dump(cfg))
    runs = ROOT / cfg.run.runs_dir
    before = set(runs.iterdir()) if runs.exists() else set()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([sys.executable, "-m", "runtime.cli", "up", "--config", str(config)],
                            cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)})
    run_dir, stopping = None, False
    while proc.poll() is None:
        time.sleep(5)
        if run_dir is None:
            new = [p for p in runs.iterdir()
                   if p.is_dir() and not p.is_symlink() and p not in before] if runs.exists() else []
            run_dir = max(new, key=lambda p: p.stat().st_mtime, default=None)
            continue
        rows = read_csv(run_dir / "metrics" / "train.csv")
        cpu = [float(r["cpu_s"]) for r in rows[-2:]]
        step = cpu[-1] - cpu[0] if len(cpu) == 2 else 0.0
        if cpu and not stopping and cpu[-1] + step > budget_s:
            proc.send_signal(signal.SIGINT)  # graceful: `whet down`'s path
            stopping = True
    if run_dir is None:
        raise RuntimeError(f"whet up exited with {proc.returncode} and left no run under {runs}")
    return run_dir


def whetstone_side(run_dir: Path) -> dict:
    """Curves and held-out rounds of a finished whetstone run."""
    metrics = run_dir / "metrics" if (run_dir / "metrics").is_dir() else run_dir
    train, evals = read_csv(metrics / "train.csv"), read_csv(metrics / "eval.csv")
    cpu_at = {int(r["policy_version"]): float(r["cpu_s"]) for r in train}
    num = lambda v: None if v in ("", None) else float(v)  # noqa: E731
    curve = [{"step": int(r["step"]), "policy_version": int(r["policy_version"]),
              "samples": int(r["samples_total"]), "cpu_s": num(r["cpu_s"]), "wall_s": num(r["wall_s"]),
              "train_reward": num(r["mean_reward"]), "pass_rate": num(r["pass_rate"]),
              "staleness_mean": num(r["staleness_mean"])} for r in train]
    events = heldout_by_version(run_dir) if (run_dir / "logs").is_dir() else {}
    heldout = []
    for r in evals:
        v = int(r["policy_version"])
        heldout.append({"version": v, "overall": num(r["overall"]), "reward": num(r["reward"]),
                        "cpu_s_reported": num(r["cpu_s"]), "cpu_s_reached": cpu_at.get(v, num(r["cpu_s"])),
                        **({"rewards": events[v]["rewards"], "pass_rates": events[v]["pass_rates"]}
                           if v in events else {})})
    last = curve[-1] if curve else {}
    sandbox = sandbox_cpu_seconds(run_dir)
    return {"run_dir": str(run_dir), "curve": curve, "heldout": heldout,
            "steps": last.get("step", 0), "samples": last.get("samples", 0),
            "cpu_s": last.get("cpu_s"), "wall_s": last.get("wall_s"),
            "sandbox_cpu_s": round(sandbox, 1) if sandbox else None}


def sandbox_cpu_seconds(run_dir: Path) -> float:
    """CPU seconds of every sandboxed job of the run (gating, training, held-out), from the
    `sandbox.finished` events in its logs (0 when it kept none)."""
    total = 0.0
    for log in sorted((run_dir / "logs").glob("*.jsonl")):
        for line in log.read_text().splitlines():
            if '"sandbox.finished"' in line:
                total += json.loads(line).get("fields", {}).get("cpu_s") or 0.0
    return total


def export_final(cfg, run_dir: Path, out: Path) -> tuple[int, Path] | None:
    """The run's newest learner checkpoint as a model folder (its bf16 weights, which the
    learner also publishes to the generators), with its policy version; None without one."""
    import torch

    from policy.model import load_model, load_tokenizer
    from policy.weights import install_state

    latest = run_dir / "checkpoints" / "latest"
    if not latest.exists():
        return None
    states = run_dir / "checkpoints" / latest.read_text().strip() / "mp_rank_00_model_states.pt"
    saved = torch.load(states, map_location="cpu", weights_only=False)
    model = load_model(cfg.model, "float32")
    with torch.no_grad():
        install_state(model, {k: v.float() for k, v in saved["module"].items()})
    model.save_pretrained(out)
    load_tokenizer(cfg.model).save_pretrained(out)
    return int(saved["version"]), out
