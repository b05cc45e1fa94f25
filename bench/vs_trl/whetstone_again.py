"""Benchmark: whetstone's side of a vs_trl seed again, with a sampling seed of its own.

    PYTHONPATH=. python bench/vs_trl/whetstone_again.py --seed-dir /tmp/vstrl-d13/seed-1 \\
        --seed-file bench/vs_trl/results/short_lean_mb2_default_trl1/seed-1.json \\
        --sampling-seed 101 --out <json>

Consumes a vs_trl work folder (its `config.json` and `train_ids.txt`, kept by `vs_trl.py
--work-dir`) and that seed's committed file. Runs `whet up` on the same config and task list
with `[run] sampling_seed` set to `--sampling-seed`: the sampler's draws and the generator's
sampling take it, while `[run] seed` still generates the tasks (the list's ids) and picks the
held-out set. Evaluates its final policy with the same function on that set; writes its
clocks (counted as `vs_trl.py` counts them), its held-out results and the seed file's sides
beside them. Another whetstone run of a seed, to tell how far whetstone's own runs spread,
as `trl_one_step.py --trl-seed` tells it for TRL. With `--set` and `--tag` (name the --out
`whetstone_again-seed-<n>-samplingseed<m>-<tag>.json`) a variant of the seed's config runs
instead: `spread.py --tag` compares its runs alone with TRL's. Does not run TRL again.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.vs_trl import vs_trl, vs_trl_report  # noqa: E402
from bench.vs_trl.vs_trl_whetstone import whetstone_side  # noqa: E402


def setting(text: str) -> tuple[list[str], object]:
    """`section.key=JSON` (`sampler.ladder_weights=[0.1,0.2,0.5,0.5]`) as (path, value)."""
    path, sep, value = text.partition("=")
    if not sep or "." not in path:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected section.key=JSON value")
    try:
        return path.split("."), json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--set {text!r}: the value is not JSON ({exc})")


def reseeded(config: Path, sampling_seed: int, runs_dir: Path,
             settings: list[tuple[list[str], object]] = ()) -> Path:
    """`config` with `[run] sampling_seed`, `settings` changed (each key must exist) and its
    runs under `runs_dir`, beside it."""
    values = json.loads(config.read_text())
    values["run"].update(sampling_seed=sampling_seed, runs_dir=str(runs_dir))
    for path, value in settings:
        table = values
        for key in path[:-1]:
            table = table.get(key) if isinstance(table, dict) else None
        if not isinstance(table, dict) or path[-1] not in table:
            raise KeyError(f"--set {'.'.join(path)}: {config} has no such setting")
        table[path[-1]] = value
    path = runs_dir.parent / "config.json"
    path.write_text(json.dumps(values, indent=1))
    return path


def main(args: argparse.Namespace) -> int:
    seed_dir, out = Path(args.seed_dir), Path(args.out)
    record = json.loads(Path(args.seed_file).read_text())
    work = seed_dir / (f"whetstone_sampling{args.sampling_seed}"
                       + (f"-{args.tag}" if args.tag else ""))
    work.mkdir(exist_ok=True)
    config = reseeded(seed_dir / "config.json", args.sampling_seed, work / "runs", args.set)
    run = vs_trl.run_child(f"whetstone, sampling seed {args.sampling_seed}",
                           ["-m", "runtime.cli", "up", "--config", str(config)],
                           work / "whetstone.log")
    run_dir = (work / "runs" / "latest").resolve()
    heldout = record["heldout_tasks"]["by_domain"]
    ev = vs_trl.evaluate_all(config, {"whetstone": str(run_dir / "model")}, work,
                             args.threads)["whetstone"]
    if ev["tasks"] != heldout:
        print("whetstone_again: held-out tasks differ from the seed file's", file=sys.stderr)
        return 1
    listed = set(record["train_tasks"]["ids"])
    whet = whetstone_side(run_dir, listed, {t for ts in heldout.values() for t in ts})
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # gigabytes; model/ stays
    reward = vs_trl_report.mean_reward(ev["per_task"])
    first = record["heldout"]["whetstone"]
    result = {
        "seed": record["seed"], "sampling_seed": args.sampling_seed, "seed_file": args.seed_file,
        "tag": args.tag, "settings": {".".join(path): value for path, value in args.set},
        "updates": whet["updates"], "samples": whet["samples"],
        "trained_outside_list": whet["trained_outside_list"],
        "clocks": vs_trl.side_clocks(run, whet["sandbox_cpu_s"], ev["clocks"], whet["training"]),
        "reward": reward, "pass_rate": vs_trl_report.pass_rate(ev["per_task"]),
        "first_run": {"reward": vs_trl_report.mean_reward(first),
                      "pass_rate": vs_trl_report.pass_rate(first),
                      "against": vs_trl_report.paired(first, ev["per_task"])},
        "trl": {"reward": vs_trl_report.mean_reward(record["heldout"]["trl"]),
                "pass_rate": vs_trl_report.pass_rate(record["heldout"]["trl"]),
                "this_run_against": vs_trl_report.paired(record["heldout"]["trl"],
                                                         ev["per_task"])},
        "curve": whet["curve"],
        "heldout": ev["per_task"]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("heldout", "curve")},
                     indent=1))
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed-dir", required=True, help="the seed's vs_trl work folder")
    p.add_argument("--seed-file", required=True, help="that seed's committed seed-<n>.json")
    p.add_argument("--sampling-seed", type=int, required=True,
                   help="whetstone's [run] sampling_seed for this run (its draws and sampling)")
    p.add_argument("--out", required=True, help="the JSON this writes")
    p.add_argument("--set", type=setting, action="append", default=[], metavar="KEY=JSON",
                   help="change one setting of the seed's config (repeatable), as "
                        "sampler.ladder_weights=[0.1,0.2,0.5,0.5]; give the run a --tag")
    p.add_argument("--tag", default="", help="the variant's name: the work folder and spread.py "
                                             "tell its runs apart by it")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    if args.set and not args.tag:
        p.error("--set needs --tag: a variant's runs must not pass for the config's own")
    return args


if __name__ == "__main__":
    from runtime import log as log_mod

    log_mod.configure(kind="bench", instance="whetstone_again", level="warning")
    sys.exit(main(parse()))
