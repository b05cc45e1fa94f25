"""Scale-up latency of a worker host: time from `up` to the first job on its executors.

    PYTHONPATH=. python -m bench.compose.worker_host [--counts 1,2,4] [--sleep 1.0] [--json out.json]

A first compose project runs NATS (published on every address), setup and a judge, with a
backlog of attempts on WHET_ATTEMPTS whose sandbox job sleeps `--sleep` seconds, and no
executor. For each N in `--counts`, a fresh worker project (docker-compose.workers.yml, its
own name and network, credentials from `whet auth export-worker`) runs
`docker compose up -d --scale executor=N executor` against this host's outside address,
then `down` once every new executor has started a job. Reported per N:

- up_s: how long the `up` command took (containers created and started);
- first_job_s: from the command's start until the host's first job began, and until the
  last of its N executors began one (judged_at minus the job's wall time, from verdicts);
- down_s: how long `down` took (each executor drains or gives back its work).

Images are built (or found by content hash) and pinned to a private tag first.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from bench.compose import project as cs
from bench.compose.compose_bench import CONCURRENCY, backlog, first_jobs, running_executors


async def measure(first, bus, state: dict, n: int, args, folder: Path) -> dict:
    await backlog(bus, state, 4 * n * CONCURRENCY + 8, args.sleep)
    worker = first.worker_host(folder / f"worker-{n}", roles="executor")
    try:
        started = time.time()
        await worker.compose("up", "-d", "--scale", f"executor={n}", "executor", timeout_s=300)
        up_s = time.time() - started
        new = await running_executors(worker)
        seen = [t - started for t in (await first_jobs(bus, new)).values()]
        down_at = time.time()
        await worker.compose("down", timeout_s=300)
        down_s = time.time() - down_at
    finally:
        await worker.compose("down", "--volumes", "--timeout", "5", timeout_s=300, check=False)
    return {"executors": n, "new": len(new), "up_s": round(up_s, 2),
            "first_job_s": round(min(seen), 2), "all_busy_s": round(max(seen), 2),
            "mean_s": round(statistics.mean(seen), 2), "down_s": round(down_s, 2)}


async def run(args, pinned_tag: str, folder: Path) -> list[dict]:
    first = cs.Project.create(folder / "secrets")
    first.env.update(WHET_NATS_BIND="0.0.0.0", WHET_IMAGE_TAG=pinned_tag)
    rows: list[dict] = []
    try:
        await first.compose("up", "-d", "nats", "setup", "judge", timeout_s=300)
        await first.wait_completed("setup", timeout_s=180)
        await first.wait_healthy(["nats", "judge"], timeout_s=180)
        bus = await first.bus()
        state = {"published": 0}
        try:
            for n in args.counts:
                rows.append(await measure(first, bus, state, n, args, folder))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            await bus.close()
    finally:
        await first.compose("down", "--volumes", "--timeout", "5", timeout_s=300, check=False)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,2,4", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--sleep", type=float, default=1.0, help="seconds each job sleeps")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    built = cs.bench_images(("nats", "slim"))
    if isinstance(built, str):
        print(built, file=sys.stderr)
        return 1
    tag = f"whetbench{secrets.token_hex(3)}"
    env = {**cs.os.environ, "DOCKER_HOST": cs.engine.engine_url()}
    pinned = cs.pin_images(built.stdout, tag, env)
    try:
        rows = anyio.run(run, args, tag, Path(tempfile.mkdtemp(prefix="whet-worker-bench-")))
    finally:
        subprocess.run(["docker", "rmi", *pinned], check=False, env=env, capture_output=True,
                       timeout=60)
    print(f"\n{'N':>3} {'up s':>6} {'first job s':>12} {'all busy s':>11} {'mean s':>7} {'down s':>7}")
    for r in rows:
        print(f"{r['executors']:>3} {r['up_s']:>6} {r['first_job_s']:>12} {r['all_busy_s']:>11} "
              f"{r['mean_s']:>7} {r['down_s']:>7}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
