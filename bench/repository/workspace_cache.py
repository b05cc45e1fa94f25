"""Episode set-up time of repository tasks: the workspace cache against building each time.

    PYTHONPATH=. python bench/repository/workspace_cache.py [--tasks 6] [--group 8] [--out FILE]

For each of `--tasks` generated repository tasks, `--group` attempts each open their session
the way an executor does (`sandbox.session.open_session`, the local sandbox): once with a
`WorkspaceCache` (the first attempt builds the workspace: files written, the visible tests'
first run in a sandbox; the others restore a hardlinked copy), once with the cache off (every
attempt builds). Both sides run in this one process on the same backend, interleaved per
task. Prints per-side mean and median set-up seconds per attempt and their ratio (goal at
most 0.2), and the restore-only time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import anyio

from envs.environment import generate
from envs.repository import ENVIRONMENT
from sandbox import open_backend
from sandbox.config import SandboxConfig
from sandbox.session import open_session
from sandbox.workspace import WorkspaceCache


async def measure(tasks: int, group: int) -> dict[str, list[float]]:
    backend = await open_backend(SandboxConfig(backend="local"), slots=1)
    cached, fresh = WorkspaceCache(), WorkspaceCache(enabled=False)
    times: dict[str, list[float]] = {"cached": [], "fresh": [], "restore": []}
    try:
        for task in generate(ENVIRONMENT, tasks, seed=17):
            for side, cache in (("fresh", fresh), ("cached", cached)):
                for i in range(group):
                    started = time.perf_counter()
                    session = await open_session(cache, backend, task)
                    spent = time.perf_counter() - started
                    times[side].append(spent)
                    if side == "cached" and i > 0:
                        times["restore"].append(spent)
                    session.close()
    finally:
        cached.close()
        fresh.close()
        await backend.aclose()
    return times


def report(times: dict[str, list[float]], tasks: int, group: int) -> str:
    mean = {k: statistics.mean(v) for k, v in times.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    lines = [f"repository tasks: {tasks}, attempts per task: {group}, local sandbox",
             f"{'side':<28}{'mean s':>10}{'median s':>10}"]
    names = {"fresh": "build every attempt", "cached": "cache (build once, restore)",
             "restore": "  restores only"}
    for key in ("fresh", "cached", "restore"):
        lines.append(f"{names[key]:<28}{mean[key]:>10.4f}{median[key]:>10.4f}")
    lines.append(f"ratio cached/fresh, mean set-up per attempt: {mean['cached'] / mean['fresh']:.3f}"
                 f" (goal <= 0.2); restore/build: {mean['restore'] / mean['fresh']:.4f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    text = report(anyio.run(measure, args.tasks, args.group), args.tasks, args.group)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
