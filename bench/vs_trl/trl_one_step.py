"""Benchmark: TRL's side of a vs_trl seed again, at one optimizer step per batch.

    PYTHONPATH=. python bench/vs_trl/trl_one_step.py --seed-dir /tmp/vstrl-lean/seed-1 \\
        --seed-file bench/vs_trl/results/short_lean_mb2/seed-1.json --out <json>

Consumes a vs_trl work folder (its `config.json` and `train_ids.txt`, kept by `vs_trl.py
--work-dir`) and that seed's committed file; runs TRL's GRPOTrainer (`vs_trl_grpo.py`) on the
same tasks, seed and settings but `learner.minibatches = 1`, evaluates its final policy with
the same function, and writes TRL's clocks (counted as `vs_trl.py` counts them), its held-out
results, and each of them set against the seed file's whetstone side: the reference for a
protocol where both sides took two steps, to tell what TRL's second step cost. With
`--trl-seed N` TRL's draw and trainer take seed N instead (the task list and held-out set stay
the seed's): another TRL run of a seed, to tell how far TRL's own runs spread. Does not run
whetstone again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.vs_trl import vs_trl, vs_trl_report  # noqa: E402


def main(args: argparse.Namespace) -> int:
    seed_dir, out = Path(args.seed_dir), Path(args.out)
    record = json.loads(Path(args.seed_file).read_text())
    config = vs_trl.trl_config(seed_dir / "config.json", 1)
    again = [] if args.trl_seed is None else ["--seed", str(args.trl_seed)]
    work = seed_dir / ("trl_one_step" + ("" if args.trl_seed is None else f"_seed{args.trl_seed}"))
    work.mkdir(exist_ok=True)
    run = vs_trl.run_child("TRL, one step", [
        "-m", "bench.vs_trl.vs_trl_grpo", "--config", str(config),
        "--out-dir", str(work / "trl"), "--threads", str(args.threads), *again], work / "trl.log")
    trl = json.loads((work / "trl" / "trl.json").read_text())
    ev = vs_trl.evaluate_all(config, {"trl": str(work / "trl" / "model")}, work,
                             args.threads)["trl"]
    clocks = vs_trl.side_clocks(run, trl["sandbox_cpu_s"], ev["clocks"], trl["training"])
    if ev["tasks"] != record["heldout_tasks"]["by_domain"]:
        print("trl_one_step: held-out tasks differ from the seed file's", file=sys.stderr)
        return 1
    whet = record["whetstone"]["clocks"]
    reward = vs_trl_report.mean_reward(ev["per_task"])
    result = {
        "seed": record["seed"], "trl_seed": trl["seed"], "seed_file": args.seed_file,
        "minibatches": 1,
        "updates": trl["updates"], "samples": trl["samples"],
        "train_tasks_sha256": trl["tasks"]["sha256"],
        "same_train_tasks": trl["tasks"]["sha256"] == record["train_tasks"]["sha256"],
        "clocks": clocks, "reward": reward, "pass_rate": vs_trl_report.pass_rate(ev["per_task"]),
        "whetstone_reward": vs_trl_report.mean_reward(record["heldout"]["whetstone"]),
        "whetstone_over_trl_one_step": {
            k: vs_trl_report.ratio(whet[k]["cpu_s"], clocks[k]["cpu_s"])
            for k in ("whole_run", "training")},
        "trl_two_steps_over_one": {
            k: vs_trl_report.ratio(record["trl"]["clocks"][k]["cpu_s"], clocks[k]["cpu_s"])
            for k in ("whole_run", "training")},
        "heldout": ev["per_task"]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "heldout"}, indent=1))
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed-dir", required=True, help="the seed's vs_trl work folder")
    p.add_argument("--seed-file", required=True, help="that seed's committed seed-<n>.json")
    p.add_argument("--out", required=True, help="the JSON this writes")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--trl-seed", type=int, default=None,
                   help="seed TRL's draw and trainer with this (default the seed's own)")
    return p.parse_args(argv)


if __name__ == "__main__":
    from runtime import log as log_mod

    log_mod.configure(kind="bench", instance="trl_one_step", level="warning")
    sys.exit(main(parse()))
