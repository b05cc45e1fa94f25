"""Benchmark: the learner's spare cores (`[learner] spare_cores`) off against on, same run.

Consumes a base config (default: configs/default.toml); runs it twice with `whet up` in
`--mode` (async by default) for `--steps` learner steps with the evaluator off, first with
`spare_cores = false`, then `true`. From each run's metrics/train.csv and learner log it
reports updates and samples trained per second at steady state (first update to last),
whole-run wall and CPU seconds, the learner's mean step seconds, and the steps that ran a
micro-batch on more than the learner's own thread; then the on/off ratios. Target: steady
updates per second at least 1.1x with the cores lent, CPU seconds alike (it moves work, it
adds none). `--from-workdir` summarises an earlier invocation's two runs again.

    python bench/learning/spare_cores.py [--config configs/default.toml] [--steps 8] \\
        [--mode async] [--out bench/learning/results/spare_cores.json] [--from-workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.learning.async_vs_sync import read_rows, run_mode, summarise  # noqa: E402


def learner_steps(run_dir: Path) -> list[dict]:
    """The fields of every `learner.step_completed` event of the run."""
    out = []
    for log in sorted((run_dir / "logs").glob("learner*.jsonl")):
        for line in log.read_text().splitlines():
            event = json.loads(line) if line.strip() else {}
            if event.get("event") == "learner.step_completed":
                out.append(event.get("fields", event))
    return out


def one_run(base: Path, mode: str, steps: int, workdir: Path, lent: bool, ran: bool) -> dict:
    """One run's figures; `ran`: it ran already under `workdir` (only read its files)."""
    label = "lent" if lent else "kept"
    rows = (read_rows(workdir / label) if ran else
            run_mode(base, mode, steps, workdir,
                     f"[learner]\nspare_cores = {str(lent).lower()}\n", label))
    result = summarise(rows, 1.0)
    result.pop("time_to_pass_rate_s", None)
    first, last = rows[0], rows[-1]
    # Every update consumes a batch of attempts, whatever share of it was trained (groups of
    # equal rewards are left out), so updates per second measure speed; samples per second
    # also move with how many groups had no signal.
    result["steady_updates_per_s"] = (round((len(rows) - 1) / (last["wall_s"] - first["wall_s"]), 5)
                                      if last["wall_s"] > first["wall_s"] else None)
    steps_done = learner_steps(workdir / label / "latest")
    step_s = [float(s["step_s"]) for s in steps_done if "step_s" in s]
    result["learner_step_s_mean"] = round(sum(step_s) / len(step_s), 2) if step_s else None
    result["steps_on_more_threads"] = sum(float(s.get("threads", 0)) > 1 for s in steps_done)
    result["learner_steps"] = len(steps_done)
    return result


def main(args: argparse.Namespace) -> int:
    base = Path(args.config).resolve()
    ran = bool(args.from_workdir)
    workdir = Path(args.from_workdir or tempfile.mkdtemp(prefix="whet-spare-cores-"))
    results: dict = {"mode": args.mode, "steps": args.steps}
    for lent in (False, True):
        results["lent" if lent else "kept"] = one_run(base, args.mode, args.steps, workdir,
                                                      lent, ran)
    kept, lent = results["kept"], results["lent"]
    ratio = lambda key: (round(lent[key] / kept[key], 3)  # noqa: E731
                         if lent.get(key) and kept.get(key) else None)
    results["ratios_lent_over_kept"] = {k: ratio(k) for k in (
        "steady_updates_per_s", "steady_samples_per_s", "samples_per_s", "wall_s", "cpu_s",
        "learner_step_s_mean")}
    results["command"] = " ".join(["bench/learning/spare_cores.py", *sys.argv[1:]])
    print(json.dumps(results, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "default.toml"))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--mode", choices=("async", "sync"), default="async")
    parser.add_argument("--out", default="")
    parser.add_argument("--from-workdir", default="",
                        help="a workdir this bench ran in (printed as its runs' folder): "
                             "summarise its two runs again, run nothing")
    sys.exit(main(parser.parse_args()))
