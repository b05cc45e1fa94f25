"""Benchmark: task intake per domain, and the sampler's decision latency at a large pool.

Consumes nothing; prints, in one run:

1. For each generated domain, tasks generated per second (generation alone, in process) and
   tasks generated *and gated* per second with every gate on (solvability, determinism and
   mutation, through the judge's `check_code` on the subprocess sandbox), with their ratio.
2. The sampler's decision latency (`Sampler.next_assignments`: seeded rng, curriculum choice,
   the `TaskAssignment` record) per task at a pool of 100k tasks, against a pool of 1k in
   the same run: the ratio shows it does not grow with the pool. Target: < 1 ms per task.

    python bench/envs/envs_bench.py [--gate-tasks 6] [--pool 100000] [--decisions 20000]

Absolute numbers move with load on a shared machine; compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from types import SimpleNamespace

import anyio

from bus.messages import Task, Verifier
from envs import registry
from envs.config import EnvEntry, GateConfig, SamplerConfig
from envs.environment import generate
from envs.intake import gate_many
from runtime.config import RunConfig

DOMAINS = ("python_functions", "data_scripts", "structured_output")


def generation_rate(name: str, n: int) -> float:
    env = registry.resolve(name, EnvEntry())
    start = time.perf_counter()
    made = sum(1 for _ in generate(env, n, seed=99))
    return made / (time.perf_counter() - start)


async def gated_rate(name: str, n: int, gates: GateConfig) -> tuple[float, int, dict]:
    env = registry.resolve(name, EnvEntry())
    start = time.perf_counter()
    tasks = list(generate(env, n, seed=123))
    accepted = []

    async def on_gated(task: Task, report) -> None:
        if report.accepted:
            accepted.append(task)

    tally = await gate_many([(t, gates) for t in tasks], gates.sandbox, on_gated,
                            concurrency=gates.concurrency)
    return n / (time.perf_counter() - start), len(accepted), dict(tally.rejected)


def decision_latency(pool: int, decisions: int) -> tuple[float, float]:
    """(mean, p99) microseconds per assignment decision at `pool` tasks, half measured."""
    from actors.sampler import Sampler  # the real decision path, without a connection

    cfg = RunConfig(sampler=SamplerConfig(min_pool=1))
    sampler = Sampler(SimpleNamespace(identity=SimpleNamespace(run_id="bench")), cfg)
    domains, verifier = ("python", "data", "structured"), Verifier(kind="python_io")
    rng = random.Random(0)
    for i in range(pool):
        domain, rung = domains[i % 3], (i // 3) % 5
        task = Task(task_id=f"{domain}/{i}", env=domain, env_version="1", domain=domain,
                    prompt="p", verifier=verifier, difficulty=float(rung))
        sampler.tasks[task.task_id] = task
        sampler.curriculum.add(task.task_id, domain, rung)
    for i in range(0, pool, 2):  # half the pool measured, spread over every band
        for k in range(4):
            sampler.curriculum.record(f"{domains[i % 3]}/{i}", rng.random() < (i % 7) / 6,
                                      group_id=f"g{i}")
    times = []
    for _ in range(decisions // 100):
        start = time.perf_counter()
        sampler.next_assignments(100)
        times.append((time.perf_counter() - start) / 100 * 1e6)
    return statistics.fmean(times), sorted(times)[int(len(times) * 0.99)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gate-tasks", type=int, default=6, help="Tasks gated per domain.")
    parser.add_argument("--pool", type=int, default=100_000)
    parser.add_argument("--decisions", type=int, default=20_000)
    args = parser.parse_args()
    gates = GateConfig()
    print(f"gates: {gates.checks} + solvability, max_mutants={gates.max_mutants}, "
          f"concurrency={gates.concurrency}, sandbox={gates.sandbox.backend}")
    print(f"{'domain':20} {'generated/s':>12} {'gated/s':>10} {'ratio':>8}  accepted  rejected")
    for name in DOMAINS:
        made = generation_rate(name, 300)
        n = args.gate_tasks * (10 if name == "structured_output" else 1)
        gated, accepted, rejected = anyio.run(gated_rate, name, n, gates)
        print(f"{name:20} {made:12.1f} {gated:10.3f} {gated / made:8.5f}  {accepted:>4}/{n:<4} "
              f"{rejected or '-'}")
    base_mean, base_p99 = decision_latency(1_000, args.decisions)
    mean, p99 = decision_latency(args.pool, args.decisions)
    print(f"sampler decision, pool 1k:   mean {base_mean:7.1f} us  p99 {base_p99:7.1f} us")
    print(f"sampler decision, pool {args.pool // 1000}k: mean {mean:7.1f} us  p99 {p99:7.1f} us"
          f"  (ratio to 1k: {mean / base_mean:.2f}; target < 1000 us: "
          f"{'met' if p99 < 1000 else 'MISSED'})")


if __name__ == "__main__":
    main()
