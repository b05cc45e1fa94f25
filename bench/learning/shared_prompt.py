"""Benchmark: a learner step that reads each group's prompt once, against reading every row
whole. Target: whole / once >= 1.3 at the short vs_trl protocol's shapes.

Consumes nothing; builds, in one process, the learner's own `Trainer` (DeepSpeed on this
machine's CPU, the config's precision) on SmolLM2-135M and one batch shaped like a step of
the main job: `--groups` groups of `--group-size` attempts, each group one prompt of
`--prompt` tokens, completions of lengths spread evenly from `--shortest` to `--longest`
(seeded). The defaults are seed 1 of the short protocol: its learner spared 5,096 prompt
positions at step 1 (six group reads of seven spared rows: 121 tokens a prompt), and its
completions averaged 81 tokens. It alternates `Trainer.train` with `learner.shared_prompt`
on and off on that batch at a learning rate too small to move the weights, the first round
as warm-up, and writes each side's median seconds, their ratio, and each side's loss and
gradient norm (they should agree: the same sums in another order).

    PYTHONPATH=. python bench/learning/shared_prompt.py [--steps 3] [--minibatches 2] \\
        [--out bench/learning/results/shared_prompt.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import msgspec
import numpy as np

from policy.batch import TrainSample
from runtime.config import load

ROOT = Path(__file__).resolve().parents[2]


def batch(args: argparse.Namespace) -> list[TrainSample]:
    """The groups: one prompt each, completions of spread lengths, advantages +-1."""
    rng = np.random.default_rng(0)
    lengths = np.linspace(args.shortest, args.longest, args.group_size).astype(int)
    out = []
    for g in range(args.groups):
        prompt = rng.integers(3, 49152, args.prompt)
        for i, n in enumerate(rng.permutation(lengths)):
            ids = np.r_[prompt, rng.integers(3, 49152, n)].astype(np.int64)
            sampled = np.r_[np.zeros(args.prompt, bool), np.ones(n, bool)]
            out.append(TrainSample(f"g{g}-{i}", f"g{g}", 0, float(i % 2) * 2 - 1, ids, sampled,
                                   np.where(sampled, np.float32(-10.8), np.float32(0))))
    return out


def main(args: argparse.Namespace) -> dict:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29549", RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0", DS_ACCELERATOR="cpu")
    import torch

    from policy.trainer import Trainer

    torch.set_num_threads(args.threads)
    cfg = load(ROOT / "configs" / "default.toml")
    base = msgspec.structs.replace(cfg.learner, lr=1e-12, minibatches=args.minibatches)
    cfg = msgspec.structs.replace(cfg, learner=base)
    trainer = Trainer(cfg.trainer, Path(tempfile.mkdtemp(prefix="whet-shared-prompt-")))
    trainer.setup()
    samples = batch(args)
    times: dict[str, list[float]] = {"whole": [], "once": []}
    last: dict[str, dict] = {}
    for i in range(args.steps + 1):
        for name, shared in (("whole", False), ("once", True)):
            trainer.lc = msgspec.structs.replace(base, shared_prompt=shared)
            began = time.perf_counter()
            last[name] = trainer.train(samples)
            if i:  # the first round warms up
                times[name].append(time.perf_counter() - began)
    trainer.close()
    whole, once = statistics.median(times["whole"]), statistics.median(times["once"])
    return {"groups": args.groups, "group_size": args.group_size, "prompt_tokens": args.prompt,
            "completion_tokens": [args.shortest, args.longest],
            "minibatches": args.minibatches, "threads": args.threads,
            "precision": cfg.learner.precision, "steps": args.steps,
            "seconds": times, "median_s": {"whole": round(whole, 3), "once": round(once, 3)},
            "whole_over_once": round(whole / once, 3),
            "loss": {k: last[k]["loss"] for k in last},
            "grad_norm": {k: last[k]["grad_norm"] for k in last},
            "prefix_reads_saved": last["once"]["prefix_reads_saved"]}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--prompt", type=int, default=122, help="prompt tokens of every group")
    p.add_argument("--shortest", type=int, default=30)
    p.add_argument("--longest", type=int, default=128)
    p.add_argument("--minibatches", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="")
    args = p.parse_args()
    result = main(args)
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
