"""Benchmark: learner step time with world_size 1 against world_size 2, same batches.

Consumes nothing; measures, in one run, on one nats-server: the learner actor as a real
process, alone (world_size 1), then with a `learner_rank` process as rank 1
(`[learner] ranks = "bus"`, meeting through KV, gloo over TCP on 127.0.0.1), each fed the
same synthetic verdicts (`--steps` batches of `--batch` sequences of `--tokens` tokens). From
the learner's `learner.step_completed` events: `train_s` (the DeepSpeed part) and `step_s`
(the whole step: assemble, train, publish the weights). The first step of each is warm-up.
Threads: world_size 1 gets `--threads`, each rank of world_size 2 half of them, so both use
the same cores. Checkpoints are left out (every 1000 steps). The two alternate for
`--rounds` rounds (1, 2, 1, 2, ...), so a change in the machine's load hits both alike; the
medians are over every round's steps.

    python bench/learning/learner_ranks.py [--model tiny] [--steps 6] [--batch 8] [--tokens 128]
                                  [--threads 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import anyio

from bench.learning.actor_procs import ActorProcess, synthetic_verdicts
from bus import subjects
from bus.nats_bus import Bus, BusSettings, Identity
from runtime.broker.embedded import EmbeddedServer
from runtime.config import RunConfig
from runtime.connect import topology

CONFIG = """
[model]
name = "{model}"
[learner]
zero_stage = 1
micro_batch_size = {batch}
checkpoint_every = 1000
lr = 1e-6
world_size = {world}
ranks = "bus"
[training]
mode = "async"
batch_size = {batch}
group_size = 2
max_staleness = 1000
"""


async def run_world(world: int, args: argparse.Namespace, tmp: Path) -> list[dict]:
    """One learner of `world` ranks on a fresh server; its step events."""
    tmp = Path(tempfile.mkdtemp(dir=tmp))
    server = EmbeddedServer(tmp / f"nats-{world}")
    server.start()
    bus = await Bus.connect(BusSettings(url=server.url), Identity("bench", "bench"))
    config = tmp / f"world{world}.toml"
    config.write_text(CONFIG.format(model=args.model, batch=args.batch, world=world))
    threads = args.threads if world == 1 else max(1, args.threads // world)
    procs = [ActorProcess("learner", "learner-1", config, server.url, tmp / f"w{world}", threads)]
    procs += [ActorProcess("learner_rank", f"learner_rank-{r}", config, server.url,
                           tmp / f"w{world}", threads) for r in range(1, world)]
    try:
        await bus.ensure_topology(topology(RunConfig()))
        for proc in procs:
            proc.start()
        await anyio.to_thread.run_sync(lambda: procs[0].wait_for(
            lambda ev: any(e["event"] == "actor.started" for e in ev)))
        verdicts = synthetic_verdicts(args.steps * args.batch // 2, 2, args.tokens // 2,
                                      args.tokens // 2)
        await bus.publish_many(subjects.verdict_subject("train"),
                               [(v.verdict_id, v) for v in verdicts])
        events = await anyio.to_thread.run_sync(lambda: procs[0].wait_for(
            lambda ev: sum(e["event"] == "learner.step_completed" for e in ev) >= args.steps, 1800))
    finally:
        for proc in procs:
            proc.stop()
        await bus.close()
        server.kill()
    return [e["fields"] for e in events if e["event"] == "learner.step_completed"]


def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="whet-ranks-bench-"))
    results: dict[int, list[dict]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for world in results:
            results[world] += anyio.run(run_world, world, args, tmp)[1:]
    print(f"learner step, model {args.model}, ZeRO-1, batch {args.batch} x {args.tokens} tokens, "
          f"{args.threads} threads in all, {args.rounds} rounds of {args.steps - 1} steps "
          "after warm-up")
    base = statistics.median(f["train_s"] for f in results[1])
    for world, steps in results.items():
        train = statistics.median(f["train_s"] for f in steps)
        step = statistics.median(f["step_s"] for f in steps)
        print(f"  world_size {world}: train_s median {train:.3f} s, step_s median {step:.3f} s, "
              f"train_s vs world_size 1 {train / base:.2f}  "
              f"(train_s {', '.join(format(f['train_s'], '.3f') for f in steps)})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny", choices=["tiny", "smollm2-135m"])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    main(parser.parse_args())
