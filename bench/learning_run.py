"""Benchmark: does the default main job make SmolLM2-135M better at held-out tasks?

Consumes a config (default: configs/default.toml, the `make run` job); runs it to its
`training.max_steps` with `whet up` in a child process, then copies the run's
metrics/train.csv, metrics/eval.csv and plots into an output folder and prints the held-out
pass rate per domain at the first and last evaluated versions, the number of samples
trained on, and the wall and whole-stack CPU seconds.

    python bench/learning_run.py [--config configs/default.toml] [--out bench/results/learning]

It only reports what the run measured; it decides nothing about success.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def heldout_by_version(run_dir: Path) -> dict[int, dict]:
    """Per evaluated policy version: pass rate per domain, from the evaluator's events."""
    out: dict[int, dict] = {}
    log = run_dir / "logs" / "evaluator-1.jsonl"
    for line in log.read_text().splitlines() if log.exists() else []:
        event = json.loads(line)
        if event["event"] == "evaluator.evaluated":
            f = event["fields"]
            out[int(f["policy_version"])] = {"overall": f.get("overall"),
                                             "round": f.get("round"),
                                             "reward": f.get("reward"),
                                             "rewards": f.get("rewards"),
                                             "pass_rates": f.get("pass_rates"),
                                             "attempts": f.get("attempts"),
                                             "complete": f.get("complete")}
    return out


def main(args: argparse.Namespace) -> int:
    from runtime.config import load

    config = Path(args.config).resolve()
    runs = ROOT / load(config).run.runs_dir
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "runtime.cli", "up", "--config", str(config)],
                          cwd=ROOT, env={**_env(), "PYTHONPATH": str(ROOT)})
    wall = time.monotonic() - began
    run_dir = (runs / "latest").resolve() if (runs / "latest").exists() else None
    if run_dir is None:
        print(f"no run directory under {runs}; whet up exited with {proc.returncode}")
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("metrics/train.csv", "metrics/eval.csv", "plots/reward.png",
                 "plots/heldout.png", "plots/staleness.png"):
        if (run_dir / name).exists():
            shutil.copy(run_dir / name, out / Path(name).name)
    train = read_csv(run_dir / "metrics" / "train.csv")
    heldout = heldout_by_version(run_dir)
    summary = {"run_dir": str(run_dir), "config": str(config), "exit_code": proc.returncode,
               "wall_s": round(wall, 1), "steps": len(train),
               "samples_trained": int(train[-1]["samples_total"]) if train else 0,
               "cpu_s": float(train[-1]["cpu_s"]) if train else None,
               "heldout": {str(v): heldout[v] for v in sorted(heldout)}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    if len(heldout) >= 2:
        first, last = min(heldout), max(heldout)
        for v in (first, last):
            h = heldout[v]
            print(f"held-out at version {v}: pass rate {h['overall']:.3f} {h['pass_rates']}, "
                  f"mean reward {h['reward']}, attempts {h['attempts']}")
    return 0


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "default.toml"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "learning"))
    sys.exit(main(parser.parse_args()))
