"""Benchmark: a learner step inside whetstone against the same DeepSpeed step bare.
Target: whetstone / bare <= 1.1.

Consumes nothing; measures, in one run and with the same thread count:
- bare: a child process that builds the DeepSpeed engine from the same config
  (`policy.deepspeed_setup.ds_config`) and times forward, policy-gradient loss, backward and step on
  a fixed batch of `--batch` sequences of `--tokens` tokens (half prompt, half completion);
- whetstone: the learner actor as a real process on its own nats-server, fed synthetic
  verdicts of the same shape; from its `learner.step_completed` events, `step_s` (assemble,
  train, publish the weights, bookkeeping) and `train_s` (the DeepSpeed part).
Bare runs before and after the actor; the first step of each side is warm-up. Checkpoints
are left out (every 1000 steps); publishing 257 MB of weights per step is included.

    python bench/learning/learner_overhead.py [--steps 4] [--batch 8] [--tokens 128] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from bench.learning.actor_procs import ROOT, ActorProcess, synthetic_verdicts
from bus import subjects
from bus.nats_bus import Bus, BusSettings, Identity
from runtime.broker.embedded import EmbeddedServer
from runtime.config import RunConfig, load
from runtime.connect import topology

CONFIG = """
[model]
{model}
[learner]
device = "{device}"
zero_stage = 1
precision = "bf16"
micro_batch_size = {batch}
checkpoint_every = 1000
lr = 1e-6
[training]
mode = "async"
batch_size = {batch}
group_size = 2
max_staleness = 1000
"""


def bare_steps(config_path: str, steps: int, batch: int, tokens: int) -> list[float]:
    """Time `steps` plain DeepSpeed policy-gradient steps (run in a child process)."""
    cfg = load(config_path)
    device = cfg.learner.device
    os.environ.update(DS_ACCELERATOR=device, MASTER_ADDR="127.0.0.1", MASTER_PORT="29533",
                      RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    import deepspeed
    import torch

    from policy.model import load_model
    from policy.deepspeed_setup import ds_config

    deepspeed.init_distributed(dist_backend="nccl" if device == "cuda" else "gloo")
    model = load_model(cfg.model, "float32", device).train()
    engine, *_ = deepspeed.initialize(model=model, model_parameters=list(model.parameters()),
                                      config=ds_config(cfg.learner, 1))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 49152, (batch, tokens), generator=gen).to(device)
    mask = torch.zeros(batch, tokens - 1, device=device)
    mask[:, tokens // 2 - 1:] = 1
    adv = torch.randn(batch, 1, generator=gen).to(device)
    times = []
    for _ in range(steps):
        if device == "cuda":
            torch.cuda.synchronize()
        began = time.monotonic()
        logits = engine(input_ids=ids).logits[:, :-1].float()
        logp = logits.gather(-1, ids[:, 1:, None]).squeeze(-1) - logits.logsumexp(-1)
        loss = -(logp * adv * mask).sum() / mask.sum()
        engine.backward(loss)
        engine.step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.monotonic() - began)
    return times


def run_bare(config: Path, steps: int, batch: int, tokens: int, threads: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([sys.executable, __file__, "--bare", str(config), "--steps", str(steps),
                          "--batch", str(batch), "--tokens", str(tokens)],
                         env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


async def run_whetstone(config: Path, steps: int, batch: int, tokens: int,
                        threads: int) -> list[dict]:
    tmp = Path(tempfile.mkdtemp(prefix="whet-overhead-"))
    server = EmbeddedServer(tmp / "nats")
    server.start()
    bus = await Bus.connect(BusSettings(url=server.url), Identity("bench", "bench"))
    learner = ActorProcess("learner", "learner-1", config, server.url, tmp / "run", threads)
    try:
        await bus.ensure_topology(topology(RunConfig()))
        learner.start()
        await anyio.to_thread.run_sync(lambda: learner.wait_for(
            lambda ev: any(e["event"] == "actor.started" for e in ev)))
        verdicts = synthetic_verdicts(steps * batch // 2, 2, tokens // 2, tokens // 2)
        await bus.publish_many(subjects.verdict_subject("train"),
                               [(v.verdict_id, v) for v in verdicts])
        events = await anyio.to_thread.run_sync(lambda: learner.wait_for(
            lambda ev: sum(e["event"] == "learner.step_completed" for e in ev) >= steps, 1800))
    finally:
        learner.stop()
        await bus.close()
        server.kill()
    return [e["fields"] for e in events if e["event"] == "learner.step_completed"]


def measure(steps: int, batch: int, tokens: int, threads: int, device: str = "cpu",
            model: str = 'name = "smollm2-135m"') -> dict:
    """Bare, whetstone, bare again; medians and ratios (the first step of each is warm-up)."""
    config = Path(tempfile.mkdtemp(prefix="whet-overhead-cfg-")) / "learner.toml"
    config.write_text(CONFIG.format(batch=batch, device=device, model=model))
    bare = run_bare(config, steps, batch, tokens, threads)[1:]
    whet = anyio.run(run_whetstone, config, steps, batch, tokens, threads)[1:]
    bare += run_bare(config, steps, batch, tokens, threads)[1:]
    b = statistics.median(bare)
    step = statistics.median(f["step_s"] for f in whet)
    train = statistics.median(f["train_s"] for f in whet)
    return {"bare_s": b, "bare_all": bare, "train_s": train, "step_s": step,
            "step_all": [f["step_s"] for f in whet], "train_ratio": train / b,
            "step_ratio": step / b}


def main(steps: int, batch: int, tokens: int, threads: int) -> None:
    r = measure(steps, batch, tokens, threads)
    print(f"learner step, SmolLM2-135M bf16 ZeRO-1, batch {batch} x {tokens} tokens, "
          f"{threads} threads")
    print(f"  bare DeepSpeed step:   median {r['bare_s']:.2f} s  "
          f"({', '.join(format(t, '.2f') for t in r['bare_all'])})")
    print(f"  whetstone train part:  median {r['train_s']:.2f} s  ratio {r['train_ratio']:.2f}")
    print(f"  whetstone whole step:  median {r['step_s']:.2f} s  ratio {r['step_ratio']:.2f} "
          f"(target <= 1.1)  ({', '.join(format(t, '.2f') for t in r['step_all'])})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bare", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        print(json.dumps(bare_steps(args.bare, args.steps, args.batch, args.tokens)))
    else:
        main(args.steps, args.batch, args.tokens, args.threads)
