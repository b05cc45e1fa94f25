"""Benchmark: weight sync, full weights against LoRA adapters, 1 and N generators: seconds from
the end of a learner step to every generator running the new version, and bytes per version.

Consumes nothing; for each (mode, generator count) it starts its own nats-server, one learner
process (DeepSpeed, CPU, bf16 ZeRO-1; `[learner] lora` at `--rank` for lora) and N idle
generator processes (torch engine, bf16), all real actors, and feeds the learner synthetic
verdicts for `--steps` updates. From the actors' event logs, per version:

- sync    = max over generators of (weights loaded at v) - (the learner step that made v
            finished training);
- publish = the learner's put of the object plus the KV bump; fetch/load = each generator's
            download and swap (max over generators).

Baseline in the same case, once the actors stopped: a bare `put_object` of the same number
of bytes, then N `read_object`s at once on N connections of this process (median of 3), so
`sync / bare` shows what the actors add to the transfer itself. Also the learner's step time
(`train_s`) and peak RSS, and bytes per version at `--rank` for `--sizes-model` (adapter
against full, computed without training).

    python bench/learning/weight_sync.py [--model tiny] [--generators 1 4] [--steps 3] [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from bench.learning.actor_procs import ActorProcess, synthetic_verdicts
from bus import subjects
from bus.nats_bus import Bus, BusSettings, Identity
from bus.objects import put_object, read_object
from runtime.broker.embedded import EmbeddedServer
from runtime.config import RunConfig
from runtime.connect import topology

CONFIG = """
[model]
name = "{model}"
[generator]
engine = "torch"
dtype = "bfloat16"
[learner]
zero_stage = 1
precision = "bf16"
micro_batch_size = 4
checkpoint_every = 1000
lr = 1e-6
{lora}
[training]
mode = "async"
batch_size = 4
group_size = 2
max_staleness = 1000
"""


def version_bytes(model: str, rank: int) -> dict:
    """Bytes of one published version of `model`: full bf16 weights, and a rank-`rank` adapter
    on every linear layer of the decoder blocks (the default targets)."""
    import torch

    from policy.config import LoraSettings, ModelConfig
    from policy.lora import adapter_state, encode_adapter, wrap
    from policy.model import load_model
    from policy.weights import encode_parts

    torch.set_num_threads(1)
    base = load_model(ModelConfig(name=model))
    full = sum(len(p) for p in encode_parts(base.state_dict()))
    settings = LoraSettings(rank=rank)
    adapter = sum(len(p) for p in encode_adapter(adapter_state(wrap(base, settings)),
                                                 settings, model))
    return {"model": model, "rank": rank, "full_bytes": full, "lora_bytes": adapter,
            "lora_share": round(adapter / full, 5), "target_share": 1 / 20}


async def bare_transfer(url: str, size: int, readers: int, repeats: int = 3) -> float:
    """Median seconds of a put of `size` bytes, then `readers` concurrent whole reads."""
    data = os.urandom(size)
    buses = [await Bus.connect(BusSettings(url=url), Identity("bench", f"bench-{i}"))
             for i in range(readers)]
    times = []
    try:
        for i in range(repeats):
            began = time.monotonic()
            await put_object(buses[0], subjects.BUCKET_WEIGHTS, f"bench-{i}", data)
            async with anyio.create_task_group() as tg:
                for b in buses:
                    tg.start_soon(read_object, b, subjects.BUCKET_WEIGHTS, f"bench-{i}")
            times.append(time.monotonic() - began)
    finally:
        for b in buses:
            await b.close()
    return statistics.median(times)


def sync_times(learner: ActorProcess, generators: list[ActorProcess]) -> list[dict]:
    """One row per version every generator loaded: sync, publish, fetch and load seconds."""
    steps = {e["fields"]["policy_version"]: e for e in learner.events("learner.step_completed")}
    published = {e["fields"]["policy_version"]: e for e in learner.events("learner.weights_published")}
    rows = []
    for version, step in sorted(steps.items()):
        loads = [next((e for e in g.events("generator.weights_loaded")
                       if e["fields"]["policy_version"] == version), None) for g in generators]
        if None in loads or version not in published:
            continue
        end = step["fields"]["trained_at"]
        rows.append({"version": version, "bytes": published[version]["fields"]["bytes"],
                     "sync_s": round(max(e["ts"] for e in loads) - end, 4),
                     "publish_s": published[version]["fields"]["seconds"],
                     "fetch_s": max(e["fields"]["fetch_s"] for e in loads),
                     "load_s": max(e["fields"]["load_s"] for e in loads),
                     "train_s": step["fields"].get("train_s")})
    return rows


def peak_rss_mb(proc: ActorProcess) -> float:
    """The process's peak resident memory so far (VmHWM), in MB."""
    assert proc.proc is not None
    for line in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return -1.0


async def one_case(model: str, mode: str, generators: int, steps: int, rank: int) -> dict:
    """Start the actors for (mode, generators), run `steps` updates, measure, stop."""
    tmp = Path(tempfile.mkdtemp(prefix=f"whet-sync-{mode}-{generators}-"))
    server = EmbeddedServer(tmp / "nats")
    server.start()
    config = tmp / "bench.toml"
    lora = f"lora = {{ rank = {rank}, alpha = {2 * rank} }}" if mode == "lora" else ""
    config.write_text(CONFIG.format(model=model, lora=lora))
    bus = await Bus.connect(BusSettings(url=server.url), Identity("bench", "bench"))
    procs: list[ActorProcess] = []
    try:
        await bus.ensure_topology(topology(RunConfig()))
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
                await anyio.to_thread.run_sync(lambda g=g: g.wait_for(lambda ev: any(
                    e["event"] == "generator.weights_loaded"
                    and e["fields"]["policy_version"] == step + 1 for e in ev)))
        rows = sync_times(learner, gens)
        rss = peak_rss_mb(learner)
    finally:
        for p in procs:
            p.stop()
        await bus.close()
    try:
        size = rows[0]["bytes"]
        bare = await bare_transfer(server.url, size, generators)
    finally:
        server.kill()
    sync = statistics.median(r["sync_s"] for r in rows)
    return {"mode": mode, "generators": generators, "bytes": size, "median_sync_s": sync,
            "bare_put_get_s": round(bare, 4), "sync_over_bare": round(sync / bare, 2),
            "learner_train_s": statistics.median(r["train_s"] for r in rows),
            "learner_peak_rss_mb": rss, "rows": rows}


def report(cases: list[dict], sizes: dict) -> None:
    """A line per case, and the bytes per version at the size model."""
    for c in cases:
        print(f"{c['mode']:>4} x{c['generators']}: {c['bytes']:>11,} B/version, median sync "
              f"{c['median_sync_s']:.3f} s, bare put+get {c['bare_put_get_s']:.3f} s "
              f"(x{c['sync_over_bare']}), learner step {c['learner_train_s']:.2f} s, "
              f"peak RSS {c['learner_peak_rss_mb']:.0f} MB")
    print(f"{sizes['model']} rank {sizes['rank']}: adapter {sizes['lora_bytes']:,} B against full "
          f"{sizes['full_bytes']:,} B = {sizes['lora_share']:.4f} (target <= 0.05)")


async def main(args: argparse.Namespace) -> None:
    sizes = await anyio.to_thread.run_sync(version_bytes, args.sizes_model, args.rank)
    cases = [await one_case(args.model, mode, n, args.steps, args.rank)
             for mode in ("full", "lora") for n in args.generators]
    report(cases, sizes)
    if args.out:
        args.out.write_text(json.dumps({
            "command": "PYTHONPATH=. python bench/learning/weight_sync.py " + " ".join(args.argv),
            "machine": {"cpus": len(os.sched_getaffinity(0)),
                        "python": platform.python_version()},
            "model": args.model, "steps": args.steps, "rank": args.rank,
            "bytes_per_version": sizes, "cases": cases}, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny", choices=["tiny", "smollm2-135m"])
    parser.add_argument("--generators", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--sizes-model", default="smollm2-135m", choices=["tiny", "smollm2-135m"])
    parser.add_argument("--out", type=Path)
    parsed = parser.parse_args()
    parsed.argv = sys.argv[1:]
    anyio.run(main, parsed)
