"""Sandbox throughput and start latency, every backend against plain subprocess in one run.

    PYTHONPATH=. python bench/sandbox/sandbox_bench.py [--backends plain,local,warm,docker,docker-warm]
        [--concurrency 1,2,4,8] [--jobs 48] [--json out.json]

Workloads: `python3 -c pass`, and a small unittest module (`python3 -m unittest`, 5 tests).
Per (backend, workload, concurrency): jobs/s, p50/p99 job latency, and the ratio of jobs/s to
plain subprocess at the same point. Start latency is measured with a third job,
`python3 -c "import time; print(time.time())"`: the time from `Backend.run()` to the first
line of Python running in the sandbox (interpreter start included on cold paths).

'local-bwrap' is bubblewrap per job, 'local' a sandbox pre-forked by the zygote and a fresh
`exec` of the command (warm_python off), 'warm' the command run in-process in that sandbox,
'docker' a fresh container per job, 'docker-warm' a job started by a warm container's runner. Plain runs the
host's /usr/bin/python3 (the same Debian 3.11 as the environment tree).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import anyio

from bus.messages import Job, Limits
from sandbox import open_backend
from sandbox.config import SandboxConfig

TEST_MODULE = b'''import unittest

class Small(unittest.TestCase):
    def test_add(self): self.assertEqual(1 + 1, 2)
    def test_str(self): self.assertIn("a", "abc")
    def test_list(self): self.assertEqual(sorted([3, 1, 2]), [1, 2, 3])
    def test_dict(self): self.assertEqual({"a": 1}.get("a"), 1)
    def test_raise(self):
        with self.assertRaises(ZeroDivisionError): 1 / 0
'''
WORKLOADS = {
    "pass": Job(command=["python3", "-c", "pass"]),
    "unittest": Job(command=["python3", "-m", "unittest", "-q", "test_small"],
                    files={"test_small.py": TEST_MODULE}),
}
START_PROBE = Job(command=["python3", "-c", "import time; print(time.time())"])
CONFIGS = {
    "plain": SandboxConfig(backend="subprocess"),
    "local-bwrap": SandboxConfig(backend="local", prefork=False, warm_python=False),
    "local": SandboxConfig(backend="local", warm_python=False),
    "warm": SandboxConfig(backend="local", warm_python=True),
    "docker": SandboxConfig(backend="docker", docker_warm_pool=0),
    "docker-warm": SandboxConfig(backend="docker", docker_warm_pool=8),
}


def for_backend(job: Job, name: str) -> Job:
    limits = Limits(timeout_s=30, cpu_s=30)
    command = ["/usr/bin/python3", *job.command[1:]] if name == "plain" else job.command
    return Job(command=command, files=job.files, limits=limits)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(backend, job: Job, jobs: int, concurrency: int, probe: bool) -> dict:
    latencies: list[float] = []
    starts: list[float] = []
    failures: list[str] = []
    limiter = anyio.Semaphore(concurrency)

    async def one() -> None:
        async with limiter:
            submitted = time.time()
            t0 = time.monotonic()
            result = await backend.run(job)
            latencies.append(time.monotonic() - t0)
            if result.status != "ok":
                failures.append(f"{result.status}: {result.stderr[-200:]}{result.sandbox_error}")
            elif probe:
                starts.append(float(result.stdout.split()[0]) - submitted)

    began = time.monotonic()
    async with anyio.create_task_group() as tg:
        for _ in range(jobs):
            tg.start_soon(one)
    elapsed = time.monotonic() - began
    row = {"jobs_s": jobs / elapsed, "p50_ms": pct(latencies, 0.5) * 1e3,
           "p99_ms": pct(latencies, 0.99) * 1e3, "failures": len(failures)}
    if starts:
        row.update(start_p50_ms=pct(starts, 0.5) * 1e3, start_p99_ms=pct(starts, 0.99) * 1e3)
    if failures:
        row["first_failure"] = failures[0]
    return row


async def bench(names: list[str], levels: list[int], jobs: int) -> dict:
    results: dict = {}
    for name in names:
        backend = await open_backend(CONFIGS[name], slots=max(levels))
        try:
            for _ in range(3):  # warm-up: images, zygote, page cache
                await backend.run(for_backend(WORKLOADS["pass"], name))
            for c in levels:
                for workload, job in WORKLOADS.items():
                    row = await measure(backend, for_backend(job, name), jobs, c, probe=False)
                    results[(name, workload, c)] = row
                row = await measure(backend, for_backend(START_PROBE, name), max(jobs // 2, 8), c, probe=True)
                results[(name, "start", c)] = row
                print(f"{name:12s} c={c}: " + "  ".join(
                    f"{w} {results[(name, w, c)]['jobs_s']:.1f}/s" for w in WORKLOADS)
                    + f"  start p50 {row.get('start_p50_ms', float('nan')):.1f} ms", file=sys.stderr)
        finally:
            await backend.aclose()
    return results


def table(results: dict, names: list[str], levels: list[int]) -> str:
    lines = [f"{'backend':12s} {'workload':9s} {'c':>2s} {'jobs/s':>8s} {'x plain':>8s} "
             f"{'p50 ms':>8s} {'p99 ms':>8s} {'start p50':>9s} {'start p99':>9s} fail"]
    for name in names:
        for workload in WORKLOADS:
            for c in levels:
                row = results[(name, workload, c)]
                base = results.get(("plain", workload, c))
                ratio = row["jobs_s"] / base["jobs_s"] if base else float("nan")
                start = results[(name, "start", c)]
                lines.append(
                    f"{name:12s} {workload:9s} {c:2d} {row['jobs_s']:8.1f} {ratio:8.2f} "
                    f"{row['p50_ms']:8.1f} {row['p99_ms']:8.1f} "
                    f"{start.get('start_p50_ms', float('nan')):9.1f} "
                    f"{start.get('start_p99_ms', float('nan')):9.1f} {row['failures']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="plain,local-bwrap,local,warm,docker,docker-warm")
    parser.add_argument("--concurrency", default="1,2,4,8")
    parser.add_argument("--jobs", type=int, default=48, help="jobs per measurement")
    parser.add_argument("--json", default="", help="also write the results here")
    args = parser.parse_args()
    names = args.backends.split(",")
    if "plain" not in names:
        names.insert(0, "plain")
    levels = [int(c) for c in args.concurrency.split(",")]
    from runtime import log as log_mod

    log_mod.configure(kind="bench", instance="sandbox", level="warning")
    results = anyio.run(bench, names, levels, args.jobs)
    print(table(results, names, levels))
    for (name, workload, c), row in results.items():
        if row.get("first_failure"):
            print(f"failures in {name}/{workload}/c={c}: {row['first_failure']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{n}/{w}/{c}": row for (n, w, c), row in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
