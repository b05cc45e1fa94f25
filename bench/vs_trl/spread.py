"""How far each side's runs of a vs_trl seed spread, and the comparison over every run.

    PYTHONPATH=. python bench/vs_trl/spread.py bench/vs_trl/results/<label> [--out <json>]

Consumes a result folder's `seed-<n>.json` (each side's first run) and the reruns beside
them: `trl_one_step-seed-<n>-trlseed<m>.json` (`trl_one_step.py --trl-seed`) and
`whetstone_again-seed-<n>-samplingseed<m>.json` (`whetstone_again.py`), all on the seed's task
list and held-out set. Produces, for each seed with a rerun of either side, every run's
held-out reward and passes, each side's rerun against its first run, and whetstone against
TRL averaged over the runs each side has (each task's mean reward and pass share over a
side's runs), also as passes per domain and rung, and whether whetstone's averaged reward
reaches TRL's, with the ratio of their mean whole-run CPU (issue 22's reach, at most this:
the runs have no earlier rounds); then the same over those seeds, the task the unit and the
seed the unit (CPU summed over seeds). With `--tag`, whetstone's side is that variant's runs alone
(`whetstone_again-seed-<n>-samplingseed<m>-<tag>.json`); untagged, tagged files are left out.
Runs nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.vs_trl.vs_trl_report import mean_reward, paired, pass_rate, ratio, stratum  # noqa: E402
from envs.stats import mean_difference, mean_interval  # noqa: E402

RERUNS = {"trl": "trl_one_step-seed-{seed}-trlseed*.json",
          "whetstone": "whetstone_again-seed-{seed}-samplingseed*.json"}
"Each side's rerun files of a seed."
_TAGGED = re.compile(r"-samplingseed\d+-(?P<tag>[\w.]+)\.json$")


def tag_of(path: Path) -> str:
    """The variant tag of a whetstone rerun file ('' for the seed config's own runs)."""
    found = _TAGGED.search(path.name)
    return found["tag"] if found else ""


Run = tuple[str, dict, float]
"A side's run of a seed: its name, its per-task results and its whole-run CPU seconds."


def runs(folder: Path, record: dict, tag: str = "") -> dict[str, list[Run]]:
    """Each side's runs of the seed, the first run first. With `tag`, whetstone's runs are
    that variant's reruns alone (its first run is the config's)."""
    out = {side: [("first", record["heldout"][side],
                   record[side]["clocks"]["whole_run"]["cpu_s"])] for side in RERUNS}
    if tag:
        out["whetstone"] = []
    for side, pattern in RERUNS.items():
        for path in sorted(folder.glob(pattern.format(seed=record["seed"]))):
            if side == "whetstone" and tag_of(path) != tag:
                continue
            got = json.loads(path.read_text())
            out[side].append((path.name, got["heldout"], got["clocks"]["whole_run"]["cpu_s"]))
    return out


def averaged(side_runs: list[Run]) -> tuple[dict, dict]:
    """Each task's mean reward and pass share over a side's runs (tasks every run scored)."""
    tasks = set.intersection(*({t for t, (r, _) in res.items() if r is not None}
                               for _, res, _ in side_runs))
    reward = {t: statistics.mean(res[t][0] for _, res, _ in side_runs) for t in tasks}
    passes = {t: statistics.mean(res[t][1] == "pass" for _, res, _ in side_runs) for t in tasks}
    return reward, passes


def against(whet: tuple[dict, dict], trl: tuple[dict, dict]) -> dict:
    """Whetstone's averaged runs against TRL's: mean reward difference with its 95% interval
    (the task the unit) and the pass-share difference summed over tasks."""
    got = mean_difference(trl[0], whet[0])
    out = {"tasks": len(whet[0].keys() & trl[0].keys()),
           "pass_diff": round(sum(whet[1][t] - trl[1][t] for t in whet[1].keys() & trl[1].keys()), 2)}
    if got is not None:
        _, mean, low, high = got
        out.update(reward_diff=round(mean, 4), interval95=[round(low, 4), round(high, 4)])
    return out


def strata(whet: tuple[dict, dict], trl: tuple[dict, dict]) -> dict[str, dict]:
    """Each side's pass shares summed per domain and rung (`stratum`), over its runs."""
    out: dict[str, dict] = {}
    for side, (_, passes) in (("whetstone", whet), ("trl", trl)):
        for task, share in passes.items():
            key = out.setdefault(stratum(task), {"tasks": 0, "whetstone": 0.0, "trl": 0.0})
            key[side] = round(key[side] + share, 2)
            key["tasks"] += side == "trl"
    return dict(sorted(out.items()))


def reach(rewards: dict[str, dict], cpu: dict[str, float]) -> dict:
    """Whether whetstone's averaged held-out reward (`rewards`: each side's per-task means)
    reaches TRL's, and if so the ratio of their mean whole-run CPU seconds (`cpu`). The runs
    have no earlier rounds, so whetstone's CPU is its whole run's: the ratio is at most this."""
    got = {side: statistics.mean(r.values()) for side, r in rewards.items()}
    reached = got["whetstone"] >= got["trl"]
    return {"reward": {side: round(v, 4) for side, v in got.items()},
            "whole_run_cpu_s": {side: round(v, 1) for side, v in cpu.items()},
            "reached": reached,
            "ratio": ratio(cpu["whetstone"], cpu["trl"]) if reached else None}


def seed_spread(record: dict, by_side: dict[str, list[Run]],
                mean: dict[str, tuple[dict, dict]], cpu: dict[str, float]) -> dict:
    """One seed's runs, each side's reruns against its first run, and the sides compared on
    `mean` (each side's `averaged` runs), also as `reach` over the runs (`cpu`: each side's
    `mean_cpu`)."""
    return {
        "seed": record["seed"],
        "runs": {side: [{"run": name, "reward": mean_reward(res), "pass_rate": pass_rate(res),
                         "passes": sum(o == "pass" for _, o in res.values()),
                         "whole_run_cpu_s": run_cpu}
                        for name, res, run_cpu in rs] for side, rs in by_side.items()},
        "rerun_vs_first": {side: [paired(rs[0][1], res) for _, res, _ in rs[1:]]
                           for side, rs in by_side.items()},
        "whetstone_vs_trl_over_runs": against(mean["whetstone"], mean["trl"]),
        "reach_over_runs": reach({side: m[0] for side, m in mean.items()}, cpu),
        "passes_by_stratum": strata(mean["whetstone"], mean["trl"]),
    }


def mean_cpu(by_side: dict[str, list[Run]]) -> dict[str, float]:
    """Each side's mean whole-run CPU seconds over its runs."""
    return {side: statistics.mean(cpu for _, _, cpu in rs) for side, rs in by_side.items()}


def build(folder: Path, tag: str = "") -> dict:
    """Every seed with a rerun in `folder`, and the comparison over those seeds (a task of
    seed s is `s:task`). With `tag`, every seed with a run of that whetstone variant."""
    records = [json.loads(p.read_text()) for p in
               sorted(folder.glob("seed-*.json"), key=lambda p: int(p.stem.split("-")[1]))]
    seeds, pooled = [], {side: ({}, {}) for side in RERUNS}
    cpu = {side: 0.0 for side in RERUNS}
    for record in records:
        by_side = runs(folder, record, tag)
        if not by_side["whetstone"] or (not tag and all(len(r) == 1 for r in by_side.values())):
            continue
        mean = {side: averaged(rs) for side, rs in by_side.items()}
        seed_cpu = mean_cpu(by_side)
        seeds.append(seed_spread(record, by_side, mean, seed_cpu))
        for side, seconds in seed_cpu.items():
            cpu[side] += seconds
        for side, into in pooled.items():
            for part, values in zip(into, mean[side]):
                part.update({f"{record['seed']}:{t}": v for t, v in values.items()})
    if not seeds:
        wanted = (f"whetstone_again-seed-<n>-samplingseed<m>-{tag}.json" if tag
                  else ", ".join(RERUNS.values()))
        raise FileNotFoundError(f"{folder}: no seed has a rerun file ({wanted})")
    per_seed = [s["whetstone_vs_trl_over_runs"]["reward_diff"] for s in seeds]
    unit = mean_interval(per_seed)
    return {"folder": str(folder), **({"tag": tag} if tag else {}), "per_seed": seeds,
            "over_seeds": {"seeds": [s["seed"] for s in seeds],
                           "task_unit": against(pooled["whetstone"], pooled["trl"]),
                           "passes_by_stratum": strata(pooled["whetstone"], pooled["trl"]),
                           "reach": {**reach({side: p[0] for side, p in pooled.items()}, cpu),
                                     "seeds_reached": [s["seed"] for s in seeds
                                                       if s["reach_over_runs"]["reached"]]},
                           "seed_unit": {"reward_diff": per_seed, **(
                               {"mean": round(unit[0], 4),
                                "interval95": [round(unit[1], 4), round(unit[2], 4)]}
                               if unit else {})}}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", help="a vs_trl result folder with rerun files")
    p.add_argument("--out", default="", help="write the JSON here (default: print it)")
    p.add_argument("--tag", default="", help="whetstone's side: the runs of this variant "
                                             "(whetstone_again.py --tag) instead of the config's")
    args = p.parse_args(argv)
    try:
        result = build(Path(args.folder), args.tag)
    except FileNotFoundError as exc:
        print(f"spread: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text if not args.out else f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
