"""The one training task list of bench/vs_trl/: gated as the sampler gates it, written once, hashed.

Consumes a run config (its environments, mix, seed, gates and `[sampler] pool_per_domain`);
produces the gated training tasks by domain (in the sampler's order, stopping a domain at
`pool_per_domain` accepted tasks, gate reports kept on this machine's disk, so a second
pass costs cache reads), the file of their ids that `[envs] train_ids` points both sides
at, and the sha256 of the sorted ids. It trains and evaluates nothing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from bus.messages import Task


def digest(ids: list[str]) -> str:
    """sha256 of the sorted ids, one a line."""
    return hashlib.sha256("".join(f"{i}\n" for i in sorted(ids)).encode()).hexdigest()


async def gated_train_tasks(cfg) -> tuple[dict[str, list[Task]], float]:
    """The gated training tasks of the mix's domains, by domain in id order, and the CPU
    seconds their sandboxed gate runs took (0 when every report came from the cache)."""
    from envs.intake import FirstAccepted, KvGateCache, collect, gate_many

    found, errors = collect(cfg.envs, seed=cfg.run.seed, split="train")
    if errors:
        raise ValueError(f"training tasks: {errors[0]} (and {len(errors) - 1} more)")
    target = cfg.sampler.pool_per_domain
    accepted: dict[str, list[Task]] = {}
    spent = [0.0]
    mine = [(task, gates) for task, gates in found if cfg.envs.mix.get(task.domain, 0) > 0]
    pool = FirstAccepted((task for task, _ in mine), target)

    async def on_gated(task: Task, report) -> None:
        for ready in pool.add(task, report.accepted):
            accepted.setdefault(ready.domain, []).append(ready)

    def on_cpu(seconds: float) -> None:
        spent[0] = seconds

    await gate_many(pool.gating(mine), cfg.envs.gates.sandbox,
                    on_gated, concurrency=cfg.envs.gates.concurrency, on_cpu=on_cpu,
                    cache=KvGateCache(None, cfg.envs.gates.keep_reports))
    return {d: sorted(ts, key=lambda t: t.task_id) for d, ts in sorted(accepted.items())}, spent[0]


def write_ids(path: Path, tasks: dict[str, list[Task]]) -> tuple[list[str], str]:
    """Write the tasks' ids to `path`, one a line, sorted; the ids and their digest."""
    ids = sorted(t.task_id for ts in tasks.values() for t in ts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{i}\n" for i in ids))
    return ids, digest(ids)
