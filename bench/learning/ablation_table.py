"""The ablation's one table, from the result JSONs `ablation.py` wrote (helper).

Consumes results/ablation/<variant>-s<seed>.json; produces a markdown table, one row per
variant (its seeds pooled: a task's pass rate is its share of passing runs): pass rate at
the last round with its 95% Wilson interval over tasks, the paired change since version 0
and against its base's runs of the same seeds at the last round (tasks gained and lost,
exact sign-test p: `envs.stats`), mean reward at the last round and its paired difference
from the base's (95% interval), mean samples trained and mean whole-stack CPU seconds per
run; a warm-start variant adds a line on the warm start alone; a second table gives each
run's passes per domain and rung at both rounds. A result's `base` names the
variant whose runs are the default it changed one factor of (the default changed once: runs
before it have base `trunc_judged`). It runs nothing and decides nothing.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench.vs_trl.vs_trl_report import stratum
from envs.stats import Counts, estimate, mean_difference, paired_change


def load_results(folder: Path) -> dict[str, list[dict]]:
    """Result JSONs by variant, seeds in order."""
    out: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("*-s*.json")):
        result = json.loads(path.read_text())
        out.setdefault(result["variant"], []).append(result)
    for runs in out.values():
        runs.sort(key=lambda r: r["seed"])
    return out


def pooled(runs: list[dict], version: str) -> Counts:
    """Task id -> (runs that passed it, runs that judged it) at `version`."""
    counts: dict[str, tuple[int, int]] = {}
    for run in runs:
        for task, got in run["tasks"].get(version, {}).items():
            passed, judged = counts.get(task, (0, 0))
            counts[task] = (passed + (got["outcome"] == "pass"), judged + 1)
    return counts


def rewards(runs: list[dict], version: str) -> dict[str, float]:
    """Task id -> its mean reward over the runs that scored it at `version`."""
    got: dict[str, list[float]] = {}
    for run in runs:
        for task, r in run["tasks"].get(version, {}).items():
            if r.get("reward") is not None:
                got.setdefault(task, []).append(r["reward"])
    return {task: statistics.mean(values) for task, values in got.items()}


def reward_change(before: dict[str, float], after: dict[str, float]) -> str:
    """Mean per-task reward difference (after - before) with its 95% interval
    (`envs.stats.mean_difference`); '' for fewer than two tasks both scored."""
    got = mean_difference(before, after)
    return "" if got is None else f"{got[1]:+.3f} ({got[2]:+.3f}, {got[3]:+.3f})"


def same_seeds(base_runs: list[dict], runs: list[dict]) -> list[dict]:
    """The base's runs of the seeds `runs` have (all of them when it has none of those)."""
    seeds = {r["seed"] for r in runs}
    return [r for r in base_runs if r["seed"] in seeds] or base_runs


def _paired(before: Counts, after: Counts) -> str:
    p = paired_change(before, after)
    return f"{p.delta:+.3f} (+{p.gained}/-{p.lost}, p={p.p_value:.3f})"


def warm_lines(results: dict[str, list[dict]], last: str) -> list[str]:
    """For each variant with a warm start (its results carry the stage's `warmstart` record):
    the warm start alone (its version 0) against its base's version 0 and against its base's
    last round, with the CPU seconds each cost, so RL alone and a warm start can be compared at
    about equal CPU."""
    out = []
    for name, runs in sorted(results.items()):
        base = runs[0].get("base", "default")
        if not all("warmstart" in r for r in runs) or base not in results:
            continue
        base_runs = same_seeds(results[base], runs)
        warm = pooled(runs, "0")
        warm_cpu = sum(r["warmstart"]["cpu_s"] for r in runs) / len(runs)
        base_cpu = sum(r["cpu_s"] for r in base_runs) / len(base_runs)
        out.append("")
        out.append(f"{name}: the warm start alone (its v0; {warm_cpu:.0f} CPU-s, demonstrations "
                   f"made and trained) against {base} at v0: {_paired(pooled(base_runs, '0'), warm)}; "
                   f"against {base} at v{last} ({base_cpu:.0f} CPU-s for the whole run): "
                   f"{_paired(pooled(base_runs, last), warm)}.")
    return out


def strata_lines(results: dict[str, list[dict]], last: str) -> list[str]:
    """A second table: each run's passes per domain and rung (`stratum`), at version 0 and
    at `last`, out of the stratum's tasks; runs of one setting can land in different modes
    (one domain's rung passing from nothing or not at all), which the pooled rows hide."""
    def passes(tasks: dict[str, dict]) -> dict[str, list[int]]:
        """[passes, tasks] per stratum."""
        out: dict[str, list[int]] = {}
        for task, got in tasks.items():
            count = out.setdefault(stratum(task), [0, 0])
            count[0] += got["outcome"] == "pass"
            count[1] += 1
        return out

    tallies = {(name, run["seed"]): (passes(run["tasks"].get("0", {})),
                                     passes(run["tasks"].get(last, {})))
               for name in sorted(results, key=lambda n: (n != "default", n))
               for run in results[name]}
    keys = sorted({key for _, end in tallies.values() for key in end})
    if not keys:
        return []
    out = ["", f"Passes per domain and rung, each run: v0 -> v{last} of the stratum's tasks.", "",
           "| variant | seed | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
    for (name, seed), (start, end) in tallies.items():
        cells = [f"{start.get(key, [0])[0]} -> {end.get(key, [0, 0])[0]} of "
                 f"{end.get(key, [0, 0])[1]}" for key in keys]
        out.append(f"| {name} | {seed} | " + " | ".join(cells) + " |")
    return out


def table(folder: Path, steps: int) -> str:
    """The markdown table of every variant with results in `folder`, default first."""
    results = load_results(folder)
    if not results:
        return f"no ablation results in {folder}"
    last, first = str(steps), "0"
    lines = [f"| variant | base | seeds | pass rate v{last} (95% CI) | change v0 -> v{last} | "
             f"vs base at v{last} | reward v{last} | reward vs base (95% CI) | samples | CPU-s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in sorted(results, key=lambda n: (n != "default", n)):
        runs = results[name]
        base = runs[0].get("base", "default")
        end, start = pooled(runs, last), pooled(runs, first)
        seeds = ",".join(str(r["seed"]) for r in runs)
        if not end:
            lines.append(f"| {name} | {base} | {seeds} | no round at v{last} | | | | | | |")
            continue
        e = estimate(end)
        compared = base != name and base in results
        base_runs = same_seeds(results[base], runs) if compared else []
        vs = _paired(pooled(base_runs, last), end) if compared else ""
        reward = rewards(runs, last)
        reward_vs = reward_change(rewards(base_runs, last), reward) if compared else ""
        samples = sum(r["samples_trained"] for r in runs) / len(runs)
        cpu = sum(r["cpu_s"] for r in runs) / len(runs)
        lines.append(f"| {name} | {base} | {seeds} | {e.rate:.3f} ({e.low:.3f}-{e.high:.3f}), "
                     f"{e.tasks} tasks | {_paired(start, end)} | {vs} | "
                     f"{statistics.mean(reward.values()):.3f} | {reward_vs} | {samples:.0f} | "
                     f"{cpu:.0f} |")
    lines += warm_lines(results, last)
    lines.append("")
    lines.append("Seeds pooled: a task's pass rate is its share of passing runs; changes are "
                 "mean per-task differences, with tasks gained and lost and the exact sign test. "
                 "Base: the default the variant changed one factor of (truncated answers "
                 "scored as failures since a0648e7; judged on their text before, "
                 "`trunc_judged`).")
    lines += strata_lines(results, last)
    return "\n".join(lines)
