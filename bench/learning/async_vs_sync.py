"""Benchmark: rolling (async) against on-policy (sync) training, same config, same machine.

Consumes a base config (default: configs/default.toml); runs it twice with `whet up`, once
with `training.mode = "sync"` and once with `"async"`, each for `--steps` learner steps with
the evaluator off (it would add the same work to both). From each run's metrics/train.csv it
prints samples trained per second over the whole run and at steady state (from the first
update to the last: start-up, gating and the first generation are the same work in both
modes), the learner's idle fraction (time waiting for samples), and the wall seconds until
the training pass rate (mean of the last 3 steps) first reaches `--pass-rate`; then the
async/sync ratios. Target: async >= 1.3x sync samples/s, learner idle <= 10%.

    python bench/learning/async_vs_sync.py [--config configs/default.toml] [--steps 8] [--pass-rate 0.3]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

OVERRIDE = """extends = "{base}"
[run]
name = "{mode}"
runs_dir = "{runs}"
[training]
mode = "{mode}"
max_steps = {steps}
[actors.count]
evaluator = 0
"""


def run_mode(base: Path, mode: str, steps: int, workdir: Path, extra: str = "",
             label: str = "") -> list[dict[str, float]]:
    """Run `base` in `mode` for `steps` steps, evaluator off, with `extra` TOML appended,
    under `workdir/<label or mode>` (its checkpoints and NATS store removed after: disk);
    returns its metrics/train.csv rows."""
    label = label or mode
    runs = workdir / label
    config = workdir / f"{label}.toml"
    config.write_text(OVERRIDE.format(base=base, mode=mode, runs=runs, steps=steps) + extra)
    subprocess.run([sys.executable, "-m", "runtime.cli", "up", "--config", str(config)],
                   cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    for bulky in ("checkpoints", "nats"):  # 4-5 GB a run; metrics and logs stay
        shutil.rmtree(runs / "latest" / bulky, ignore_errors=True)
    return read_rows(runs)


def read_rows(runs: Path) -> list[dict[str, float]]:
    """The metrics/train.csv rows of the latest run under `runs`."""
    with (runs / "latest" / "metrics" / "train.csv").open(newline="") as f:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)}
                for row in csv.DictReader(f)]


def summarise(rows: list[dict[str, float]], target: float) -> dict[str, float | None]:
    last = rows[-1]
    reached = None
    for i in range(len(rows)):
        window = [r.get("pass_rate", 0.0) for r in rows[max(0, i - 2):i + 1]]
        if sum(window) / len(window) >= target:
            reached = rows[i]["wall_s"]
            break
    first = rows[0]
    steady = ((last["samples_total"] - first["samples_total"]) / (last["wall_s"] - first["wall_s"])
              if last["wall_s"] > first["wall_s"] else None)
    return {"steps": len(rows), "samples": last["samples_total"], "wall_s": last["wall_s"],
            "cpu_s": last.get("cpu_s"), "samples_per_s": last["samples_total"] / last["wall_s"],
            "first_update_wall_s": first["wall_s"], "steady_samples_per_s": steady,
            "idle_frac": last.get("idle_frac"), "time_to_pass_rate_s": reached}


def main(args: argparse.Namespace) -> int:
    base = Path(args.config).resolve()
    workdir = Path(tempfile.mkdtemp(prefix="whet-async-sync-"))
    results = {mode: summarise(run_mode(base, mode, args.steps, workdir), args.pass_rate)
               for mode in ("sync", "async")}
    s, a = results["sync"], results["async"]
    results["command"] = " ".join(["bench/learning/async_vs_sync.py", *sys.argv[1:]])
    results["ratio_samples_per_s"] = a["samples_per_s"] / s["samples_per_s"]
    if a["steady_samples_per_s"] and s["steady_samples_per_s"]:
        results["ratio_steady_samples_per_s"] = (a["steady_samples_per_s"]
                                                 / s["steady_samples_per_s"])
    print(json.dumps(results, indent=2))
    print(f"samples/s: sync {s['samples_per_s']:.3f}, async {a['samples_per_s']:.3f} "
          f"(x{results['ratio_samples_per_s']:.2f}); steady state (first update to last): "
          f"x{results.get('ratio_steady_samples_per_s') or float('nan'):.2f}; "
          f"learner idle: sync {s['idle_frac']}, async {a['idle_frac']}; "
          f"time to pass rate {args.pass_rate}: sync {s['time_to_pass_rate_s']} s, "
          f"async {a['time_to_pass_rate_s']} s")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "default.toml"))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--pass-rate", type=float, default=0.3)
    parser.add_argument("--out", default="")
    sys.exit(main(parser.parse_args()))
