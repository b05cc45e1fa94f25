"""The ablation's one table, from the result JSONs `ablation.py` wrote (helper).

Consumes results/ablation/<variant>-s<seed>.json; produces a markdown table, one row per
variant (its seeds pooled: a task's pass rate is its share of passing runs): pass rate at
the last round with its 95% Wilson interval over tasks, the paired change since version 0
and against its base's runs of the same seeds at the last round (tasks gained and lost,
exact sign-test p: `envs.stats`), mean samples trained and mean whole-stack CPU seconds per
run. A result's `base` names the variant whose runs are the default it changed one factor
of (the default changed once: runs before it have base `trunc_judged`). It runs nothing and
decides nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from envs.stats import Counts, estimate, paired_change


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


def same_seeds(base_runs: list[dict], runs: list[dict]) -> list[dict]:
    """The base's runs of the seeds `runs` have (all of them when it has none of those)."""
    seeds = {r["seed"] for r in runs}
    return [r for r in base_runs if r["seed"] in seeds] or base_runs


def _paired(before: Counts, after: Counts) -> str:
    p = paired_change(before, after)
    return f"{p.delta:+.3f} (+{p.gained}/-{p.lost}, p={p.p_value:.3f})"


def table(folder: Path, steps: int) -> str:
    """The markdown table of every variant with results in `folder`, default first."""
    results = load_results(folder)
    if not results:
        return f"no ablation results in {folder}"
    last, first = str(steps), "0"
    lines = [f"| variant | base | seeds | pass rate v{last} (95% CI) | change v0 -> v{last} | "
             f"vs base at v{last} | samples | CPU-s |", "|---|---|---|---|---|---|---|---|"]
    for name in sorted(results, key=lambda n: (n != "default", n)):
        runs = results[name]
        base = runs[0].get("base", "default")
        end, start = pooled(runs, last), pooled(runs, first)
        seeds = ",".join(str(r["seed"]) for r in runs)
        if not end:
            lines.append(f"| {name} | {base} | {seeds} | no round at v{last} | | | | |")
            continue
        e = estimate(end)
        vs = ("" if base == name or base not in results
              else _paired(pooled(same_seeds(results[base], runs), last), end))
        samples = sum(r["samples_trained"] for r in runs) / len(runs)
        cpu = sum(r["cpu_s"] for r in runs) / len(runs)
        lines.append(f"| {name} | {base} | {seeds} | {e.rate:.3f} ({e.low:.3f}-{e.high:.3f}), "
                     f"{e.tasks} tasks | {_paired(start, end)} | {vs} | {samples:.0f} | "
                     f"{cpu:.0f} |")
    lines.append("")
    lines.append("Seeds pooled: a task's pass rate is its share of passing runs; changes are "
                 "mean per-task differences, with tasks gained and lost and the exact sign test. "
                 "Base: the default the variant changed one factor of (truncated answers "
                 "scored as failures since a0648e7; judged on their text before, "
                 "`trunc_judged`).")
    return "\n".join(lines)
