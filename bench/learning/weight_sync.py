"""Benchmark: weight sync, from the end of a learner step to every generator running the
new version, for SmolLM2-135M in bf16 (257 MB). Target: <= 2 s.

Consumes nothing; starts its own nats-server, one learner process (DeepSpeed, CPU, bf16
ZeRO-1) and N idle generator processes (torch engine, bf16), all real actors. It feeds the
learner synthetic verdicts for `--steps` updates and reads the actors' event logs:

- sync    = max over generators of (weights loaded at version v) - (learner step that
            made v finished training), per version;
- publish = learner's put of the object plus the KV bump;
- fetch/load = each generator's download and swap.

Baseline in the same run: a bare `put_object` + `get_object` of 257 MB in this process,
so `sync / bare` shows what the actors add to the transfer itself.

    python bench/learning/weight_sync.py [--generators 2] [--steps 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from bench.learning.actor_procs import ActorProcess, synthetic_verdicts
from bus import subjects
from bus.nats_bus import Bus, BusSettings, Identity
from bus.objects import get_object, put_object
from runtime.broker.embedded import EmbeddedServer
from runtime.config import RunConfig
from runtime.connect import topology

CONFIG = """
[model]
name = "smollm2-135m"
[generator]
engine = "torch"
dtype = "bfloat16"
[learner]
zero_stage = 1
precision = "bf16"
micro_batch_size = 4
checkpoint_every = 1000
lr = 1e-6
[training]
mode = "async"
batch_size = 4
group_size = 2
max_staleness = 1000
"""


async def bare_transfer(bus: Bus, size: int, repeats: int = 3) -> float:
    data = os.urandom(size)
    times = []
    for i in range(repeats):
        began = time.monotonic()
        await put_object(bus, subjects.BUCKET_WEIGHTS, f"bench-{i}", data)
        await get_object(bus, subjects.BUCKET_WEIGHTS, f"bench-{i}")
        times.append(time.monotonic() - began)
    return statistics.median(times)


def sync_times(learner: ActorProcess, generators: list[ActorProcess]) -> list[dict]:
    steps = {e["fields"]["policy_version"]: e for e in learner.events("learner.step_completed")}
    published = {e["fields"]["policy_version"]: e for e in learner.events("learner.weights_published")}
    rows = []
    for version, step in sorted(steps.items()):
        loads = [next((e for e in g.events("generator.weights_loaded")
                       if e["fields"]["policy_version"] == version), None) for g in generators]
        if None in loads or version not in published:
            continue
        end = step["fields"]["trained_at"]
        rows.append({"version": version, "sync_s": max(e["ts"] for e in loads) - end,
                     "publish_s": published[version]["fields"]["seconds"],
                     "fetch_s": max(e["fields"]["fetch_s"] for e in loads),
                     "load_s": max(e["fields"]["load_s"] for e in loads)})
    return rows


async def main(generators: int, steps: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="whet-sync-"))
    server = EmbeddedServer(tmp / "nats")
    server.start()
    config = tmp / "bench.toml"
    config.write_text(CONFIG)
    bus = await Bus.connect(BusSettings(url=server.url), Identity("bench", "bench"))
    procs: list[ActorProcess] = []
    try:
        await bus.ensure_topology(topology(RunConfig()))
        bare = await bare_transfer(bus, 257 * 1024 * 1024)
        learner = ActorProcess("learner", "learner-1", config, server.url, tmp / "run").start()
        gens = [ActorProcess("generator", f"generator-{i + 1}", config, server.url,
                             tmp / "run").start() for i in range(generators)]
        procs = [learner, *gens]
        for p in procs:
            await anyio.to_thread.run_sync(lambda p=p: p.wait_for(
                lambda ev: any(e["event"] == "actor.started" for e in ev)))
        for step in range(steps):
            batch = synthetic_verdicts(2, 2, 64, 64, prefix=f"s{step}-", seed=step)
            await bus.publish_many(subjects.verdict_subject("train"),
                                   [(v.verdict_id, v) for v in batch])
            for g in gens:
                await anyio.to_thread.run_sync(lambda g=g: g.wait_for(
                    lambda ev: sum(e["event"] == "generator.weights_loaded" for e in ev) >= step + 1))
        rows = sync_times(learner, gens)
    finally:
        for p in procs:
            p.stop()
        await bus.close()
        server.kill()
    report(rows, bare, generators)


def report(rows: list[dict], bare: float, generators: int) -> None:
    print(f"weight sync, SmolLM2-135M bf16 (257 MB), {generators} idle generators")
    for r in rows:
        print(f"  v{r['version']}: sync {r['sync_s']:.2f} s (publish {r['publish_s']:.2f}, "
              f"fetch {r['fetch_s']:.2f}, load {r['load_s']:.2f})")
    median = statistics.median(r["sync_s"] for r in rows)
    print(f"median sync {median:.2f} s (target <= 2 s); bare put+get in this run {bare:.2f} s; "
          f"ratio sync/bare {median / bare:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--generators", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    anyio.run(main, args.generators, args.steps)
