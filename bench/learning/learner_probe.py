"""Where a learner step's time goes, without the bus: the learner's own Trainer against a
bare policy-gradient step on the SAME DeepSpeed engine, alternating, in one process.

Consumes a model folder or name and a device; prints per-variant medians:
- bare: forward, log-softmax gather, loss, backward, step (as bench/learning/learner_overhead.py);
- trainer: `policy.trainer.Trainer.train` on the same batch built by `policy.batch.assemble`
  from synthetic verdicts (collation, the clipped off-policy objective, statistics).
Equal medians put any gap seen in bench/learning/learner_overhead.py in the actor around the
trainer (publishing, the event loop), not in the training code.

    python bench/learning/learner_probe.py [--device cuda] [--model-path DIR] [--batch 32] [--tokens 512]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.learning.actor_procs import synthetic_verdicts
from policy.batch import assemble
from policy.groups import Group
from runtime.config import load


def config_for(args: argparse.Namespace) -> Path:
    model = f'path = "{args.model_path}"' if args.model_path else 'name = "smollm2-135m"'
    path = Path(tempfile.mkdtemp(prefix="whet-probe-")) / "c.toml"
    path.write_text(f"[model]\n{model}\n[learner]\ndevice = \"{args.device}\"\nzero_stage = 1\n"
                    f"precision = \"bf16\"\nmicro_batch_size = {args.batch}\n")
    return path


def samples(batch: int, tokens: int, max_len: int) -> list:
    verdicts = synthetic_verdicts(batch // 2, 2, tokens // 2, tokens // 2)
    groups = []
    for i in range(0, len(verdicts), 2):
        g = Group(verdicts[i].attempt.group_id, 2, 0.0)
        for v in verdicts[i:i + 2]:
            g.members[v.verdict_id] = (v, None)
        groups.append(g)
    return assemble(groups, 0, 10, True, max_len).samples


def main(args: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29547", RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0")
    import torch

    from policy.trainer import Trainer

    cfg = load(config_for(args))
    trainer = Trainer(cfg.trainer, Path(tempfile.mkdtemp(prefix="whet-probe-ckpt-")))
    trainer.setup()
    batch = samples(args.batch, args.tokens, cfg.model.max_context)
    engine, device = trainer.engine, trainer.device
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 49152, (args.batch, args.tokens), generator=gen).to(device)
    mask = torch.zeros(args.batch, args.tokens - 1, device=device)
    mask[:, args.tokens // 2 - 1:] = 1
    adv = torch.randn(args.batch, 1, generator=gen).to(device)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def bare() -> None:
        logits = engine(input_ids=ids).logits[:, :-1].float()
        logp = logits.gather(-1, ids[:, 1:, None]).squeeze(-1) - logits.logsumexp(-1)
        engine.backward(-(logp * adv * mask).sum() / mask.sum())
        engine.step()

    times: dict[str, list[float]] = {"bare": [], "trainer": []}
    for i in range(args.steps + 1):
        for name, step in (("bare", bare), ("trainer", lambda: trainer.train(batch))):
            sync()
            began = time.perf_counter()
            step()
            sync()
            if i:  # the first round warms up
                times[name].append(time.perf_counter() - began)
    b, t = statistics.median(times["bare"]), statistics.median(times["trainer"])
    print(f"learner probe on {device}: batch {args.batch} x {args.tokens}: bare step {b:.3f} s, "
          f"Trainer.train {t:.3f} s (x{t / b:.2f}) over {args.steps} steps each", flush=True)
    trainer.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model-path", default="")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    main(parser.parse_args())
