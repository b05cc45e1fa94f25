"""Benchmark: which training tasks each side of a vs_trl seed practised, per domain and rung.

Consumes a seed's work folder of `vs_trl.py` (`--work-dir`/seed-<n>): its `train_ids.txt`, its
`config.json` and whetstone's run store (`runs/<id>/nats/jetstream`, read from a copy through a
private nats-server). Produces JSON: for the list, for TRL's rows (rebuilt by `draw_order` from
the list in its order and the seed, as vs_trl_grpo draws them) and for whetstone's judged
training groups: groups per domain and rung and distinct tasks, and whetstone's groups with
signal (rewards not all equal) per domain and rung. It changes nothing; TRL's
rows are rebuilt, not read: they are what TRL drew where this code's `draw_order` is the one
that ran (the distinct counts equal trl.json's `tasks_drawn`; runs before MixDraw drew each
row's domain by a weighted coin, and draws.py at 1596889 rebuilds those).

    python bench/vs_trl/draws.py /tmp/vstrl/seed-1 [...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.learning.rejudge_rounds import stored_verdicts  # noqa: E402

_RUNG = re.compile(r"-L(\d+)-")


def stratum(task_id: str) -> str:
    """'<env>/L<rung>' of a task id ('<env>/v1-L0-…')."""
    env = task_id.split("/", 1)[0]
    found = _RUNG.search(task_id)
    return f"{env}/L{found[1]}" if found else f"{env}/?"


def tally(groups: list[str]) -> dict:
    """Groups per stratum, distinct tasks and the most groups of one task, of a list of task
    ids (one per group)."""
    return {"groups": len(groups), "distinct_tasks": len(set(groups)),
            "most_groups_of_one_task": max(Counter(groups).values(), default=0),
            "by_stratum": dict(sorted(Counter(stratum(t) for t in groups).items())),
            "distinct_by_stratum": dict(sorted(Counter(stratum(t) for t in set(groups)).items()))}


def whetstone_groups(seed_dir: Path) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Every judged training group of the seed's whetstone run: its (task id, domain); and
    the task ids of the groups with signal (rewards not all equal)."""
    stores = sorted(seed_dir.glob("runs/*/nats/jetstream"))
    if not stores:
        sys.exit(f"draws: no run store under {seed_dir}/runs/*/nats/jetstream")
    seen: dict[str, tuple[str, str]] = {}
    rewards: dict[str, set[float]] = {}
    for verdict in stored_verdicts(stores[-1]):
        attempt = verdict.attempt
        if attempt.purpose == "train":
            seen.setdefault(attempt.group_id, (attempt.task.task_id, attempt.task.domain))
            rewards.setdefault(attempt.group_id, set()).add(float(verdict.reward))
    return seen, [seen[g][0] for g, r in rewards.items() if len(r) > 1]


def trl_rows(seed_dir: Path, ids: list[str], domains: dict[str, str]) -> list[str]:
    """TRL's rows as vs_trl_grpo draws them: `draw_order` over the list, by domain in id order
    (`domains`: each environment's domain)."""
    from types import SimpleNamespace

    from bench.vs_trl.vs_trl_grpo import draw_order
    from runtime.config import load

    cfg = load(seed_dir / "config.json")
    by_domain: dict[str, list] = {}
    for task_id in sorted(ids):
        domain = domains[task_id.split("/", 1)[0]]
        by_domain.setdefault(domain, []).append(SimpleNamespace(task_id=task_id))
    per_step = cfg.training.batch_size // cfg.training.group_size
    drawn = draw_order(by_domain, cfg.envs.mix, cfg.training.max_steps * per_step, cfg.run.seed)
    return [task.task_id for _, task in drawn]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seed_dirs", type=Path, nargs="+")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = {"command": "PYTHONPATH=. python bench/vs_trl/draws.py "
                         + " ".join(str(d) for d in args.seed_dirs)
                         + (f" --out {args.out}" if args.out else ""), "seeds": {}}
    for seed_dir in args.seed_dirs:
        ids = (seed_dir / "train_ids.txt").read_text().split()
        groups, with_signal = whetstone_groups(seed_dir)
        domains = {task_id.split("/", 1)[0]: domain for task_id, domain in groups.values()}
        result["seeds"][seed_dir.name] = {
            "list": tally(ids), "trl_rows": tally(trl_rows(seed_dir, ids, domains)),
            "whetstone_groups": tally([task_id for task_id, _ in groups.values()]),
            "whetstone_groups_with_signal": dict(sorted(Counter(
                stratum(t) for t in with_signal).items()))}
    text = json.dumps(result, indent=1) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
