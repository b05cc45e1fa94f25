"""Benchmark: does the default main job make SmolLM2-135M better at held-out tasks?

Consumes a config (default: configs/default.toml, the `make run` job); runs it to its
`training.max_steps` with `whet up` in a child process, then copies the run's
metrics/train.csv, metrics/eval.csv and plots into an output folder and prints the held-out
pass rate and mean reward per domain at the first and last evaluated versions, the number
of samples trained on, and the wall and whole-stack CPU seconds. From the judges' events it
pairs each round with the first on the same held-out tasks: mean reward change with its
standard error, tasks whose reward rose or fell, passes gained and lost with the sign test,
over all held-out tasks and over those of the trained domains; tasks.json keeps each round's
per-task (reward, outcome) so every paired figure can be recomputed.

    python bench/learning/learning_run.py [--config configs/default.toml] [--out bench/learning/results/main_job]
    python bench/learning/learning_run.py --from-run runs/<run id>    # summarise a finished run again

It only reports what the run measured; it decides nothing about success.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from envs.evaluation import round_of  # noqa: E402
from envs.stats import sign_test  # noqa: E402


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


def eval_rewards(run_dir: Path) -> dict[int, dict[str, tuple[float, str]]]:
    """Per eval round: each held-out task's (reward, outcome), from the judges' events."""
    out: dict[int, dict[str, tuple[float, str]]] = {}
    for log in sorted((run_dir / "logs").glob("judge-*.jsonl")):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            f = event.get("fields", {})
            round_ = round_of(f.get("attempt_id", "").rsplit(".", 1)[0])
            if event["event"] == "judge.judged" and round_ is not None and f.get("reward") is not None:
                out.setdefault(round_, {})[f["task_id"]] = (f["reward"], f["outcome"])
    return out


def paired(before: dict[str, tuple[float, str]], after: dict[str, tuple[float, str]]) -> dict:
    """The same held-out tasks at two versions: mean reward change with its standard error,
    tasks whose reward rose or fell, and passes gained and lost."""
    common = sorted(set(before) & set(after))
    if len(common) < 2:
        return {"tasks": len(common)}
    diff = [after[t][0] - before[t][0] for t in common]
    mean, se = statistics.mean(diff), statistics.stdev(diff) / len(diff) ** 0.5
    passed = {name: {t for t in common if side[t][1] == "pass"}
              for name, side in (("before", before), ("after", after))}
    gained, lost = len(passed["after"] - passed["before"]), len(passed["before"] - passed["after"])
    return {"tasks": len(common), "reward_change": round(mean, 4), "stderr": round(se, 4),
            "t": round(mean / se, 2) if se else None,
            "rose": sum(d > 0 for d in diff), "fell": sum(d < 0 for d in diff),
            "passes_before": len(passed["before"]), "passes_after": len(passed["after"]),
            "pass_ratio": round(len(passed["after"]) / len(passed["before"]), 3)
            if passed["before"] else None,
            "passes_gained": gained, "passes_lost": lost,
            "sign_test_p": sign_test(gained, lost)}


def trained_only(results: dict[str, tuple[float, str]], envs: set[str]
                 ) -> dict[str, tuple[float, str]]:
    """The results of tasks whose environment (the id's prefix) is one of `envs`."""
    return {t: r for t, r in results.items() if t.split("/", 1)[0] in envs}


def trained_envs(run_dir: Path) -> set[str]:
    """The environments (a task id's prefix) of the domains the run's mix trains on, from its
    resolved config."""
    from envs import registry
    from runtime.config import load

    envs = load(run_dir / "config.resolved.json").envs
    resolved = [registry.resolve(name, entry) for name, entry in registry.enabled(envs.use).items()]
    return {env.name for env in resolved if envs.mix.get(env.domain, 0.0) > 0}


def main(args: argparse.Namespace) -> int:
    from runtime.config import load

    config = Path(args.config).resolve()
    runs = ROOT / load(config).run.runs_dir
    began = time.monotonic()
    if args.from_run:  # summarise a finished run again
        proc = subprocess.CompletedProcess([], 0)
        run_dir = Path(args.from_run).resolve()
    else:
        proc = subprocess.run([sys.executable, "-m", "runtime.cli", "up", "--config", str(config)],
                              cwd=ROOT, env={**_env(), "PYTHONPATH": str(ROOT)})
        run_dir = (runs / "latest").resolve() if (runs / "latest").exists() else None
    wall = time.monotonic() - began
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
    rounds = eval_rewards(run_dir)
    first_round = min(rounds, default=None)
    summary = {"run_dir": str(run_dir), "config": str(config), "exit_code": proc.returncode,
               "wall_s": float(train[-1]["wall_s"]) if args.from_run and train else round(wall, 1),
               "steps": len(train),
               "samples_trained": int(train[-1]["samples_total"]) if train else 0,
               "cpu_s": float(train[-1]["cpu_s"]) if train else None,
               "heldout": {str(v): heldout[v] for v in sorted(heldout)},
               "paired_with_first_round": {str(r): paired(rounds[first_round], rounds[r])
                                           for r in sorted(rounds) if r != first_round}}
    trained = trained_envs(run_dir)
    if trained:  # the must-show's figure: held-out tasks of the domains the run trained on
        summary["trained_envs"] = sorted(trained)
        summary["trained_paired_with_first_round"] = {
            str(r): paired(trained_only(rounds[first_round], trained), trained_only(rounds[r], trained))
            for r in sorted(rounds) if r != first_round}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "tasks.json").write_text(json.dumps(  # the per-task results behind every paired figure
        {str(r): {t: list(v) for t, v in sorted(rounds[r].items())} for r in sorted(rounds)},
        indent=0) + "\n")
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
    parser.add_argument("--out", default=str(ROOT / "bench" / "learning" / "results" / "main_job"))
    parser.add_argument("--from-run", default="", help="summarise this finished run directory")
    sys.exit(main(parser.parse_args()))
