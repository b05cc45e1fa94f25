"""Compose scaling: time for new executors to take work, and throughput against N.

    PYTHONPATH=. python bench/compose/compose_bench.py [--counts 1,2,4] [--sleep 1.0] [--window 20]
        [--json out.json]

Brings up the part of the compose stack that executes work (nats, setup, judge; the images
are built offline first, or found by content hash), keeps a backlog of attempts on
WHET_ATTEMPTS whose sandbox job sleeps `--sleep` seconds, and for each N in `--counts`
(ascending) runs `docker compose up -d --no-deps --scale executor=N --no-recreate executor`
(the stack's other services stay out, so they add no load), then reports:

- scale_s: how long the compose command took;
- first_work_s: from the command's start until a new executor started its first job
  (judged_at minus the job's wall time, from its verdict; slowest and mean over the new
  instances);
- jobs_per_s: verdicts per second over `--window` seconds once all N executors are busy,
  and its ratio to N=1 measured in the same run (ideal: N).

Sleeping jobs measure the stack's scheduling and sandbox overhead rather than the 2 cores;
every executor runs `[executor] concurrency` jobs at once (configs/compose.toml).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from bench.compose import project as cs
from runtime.config import load

CONCURRENCY = load(cs.ROOT / "configs" / "compose.toml").executor.concurrency


async def backlog(bus, state: dict, wanted: int, sleep_s: float) -> None:
    """Top the queue up so at least `wanted` attempts wait beyond what is judged."""
    judged = len(await cs.verdicts(bus, "bench"))
    missing = wanted - (state["published"] - judged)
    if missing > 0:
        start = state["published"]
        batch = cs.sleepy_attempts("bench", start + missing, sleep_s)[start:]
        await cs.publish(bus, batch)
        state["published"] += missing


async def first_jobs(bus, instances: set[str], timeout_s: float = 180.0) -> dict[str, float]:
    """Unix time each of `instances` started its first job (judged_at minus the job's wall
    time, from the verdicts), once every one of them has finished one."""
    with anyio.fail_after(timeout_s):
        while True:
            first: dict[str, float] = {}
            for found in (await cs.verdicts(bus, "bench")).values():
                turn = found[0].attempt.turns[-1]
                if turn.executor in instances and turn.execution is not None:
                    began = found[0].judged_at - turn.execution.wall_s
                    first[turn.executor] = min(first.get(turn.executor, began), began)
            if set(first) == instances:
                return first
            await anyio.sleep(0.5)


async def running_executors(project) -> set[str]:
    """Instance names of the running executor containers (executor-<hostname>)."""
    return {f"executor-{c['Config']['Hostname']}" for c in await project.containers("executor")
            if c["State"]["Running"]}


async def measure(project, bus, state: dict, n: int, args) -> dict:
    before = await running_executors(project)
    await backlog(bus, state, int(n * CONCURRENCY * (args.window + 60) / args.sleep), args.sleep)
    started = time.time()
    await project.compose("up", "-d", "--no-deps", "--scale", f"executor={n}", "--no-recreate",
                          "executor", timeout_s=300)
    scale_s = time.time() - started
    new = await running_executors(project) - before
    seen = {i: t - started for i, t in (await first_jobs(bus, new)).items()}
    judged_0, t_0 = len(await cs.verdicts(bus, "bench")), time.monotonic()
    await anyio.sleep(args.window)
    judged_1, t_1 = len(await cs.verdicts(bus, "bench")), time.monotonic()
    return {"executors": n, "new": len(new), "scale_s": round(scale_s, 2),
            "first_work_s_max": round(max(seen.values()), 2),
            "first_work_s_mean": round(statistics.mean(seen.values()), 2),
            "jobs_per_s": round((judged_1 - judged_0) / (t_1 - t_0), 2)}


async def run(args) -> list[dict]:
    project = cs.Project.create(Path(tempfile.mkdtemp(prefix="whet-compose-bench-")) / "secrets")
    rows: list[dict] = []
    try:
        await project.compose("up", "-d", "nats", "setup", "judge", timeout_s=300)
        await project.wait_healthy(["nats", "judge"], timeout_s=180)
        bus = await project.bus()
        state = {"published": 0}
        try:
            for n in args.counts:
                rows.append(await measure(project, bus, state, n, args))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            await bus.close()
    finally:
        await project.compose("down", "--volumes", "--timeout", "5", timeout_s=300, check=False)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,2,4", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--sleep", type=float, default=1.0, help="seconds each job sleeps")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of throughput measured")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    built = cs.bench_images()
    if isinstance(built, str):
        print(built, file=sys.stderr)
        return 1
    rows = anyio.run(run, args)
    base = rows[0]["jobs_per_s"] or float("nan")
    print(f"\n{'N':>3} {'scale s':>8} {'first job s (max/mean)':>24} {'jobs/s':>8} {'vs N=1':>7}")
    for r in rows:
        first = f"{r['first_work_s_max']}/{r['first_work_s_mean']}"
        print(f"{r['executors']:>3} {r['scale_s']:>8} {first:>24} {r['jobs_per_s']:>8} "
              f"{r['jobs_per_s'] / base:>7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
