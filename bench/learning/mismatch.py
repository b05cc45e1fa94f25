"""Benchmark: how far do the generator's sampled logprobs sit from the learner's own, at
identical weights, in bf16 and fp32?

Consumes a config (default: configs/default.toml: its model, training sampling and
context); samples `--prompts` x `--group` completions of the validation split's prompts with
the generator's torch engine in each dtype, then recomputes their logprobs with the
learner's `Trainer` (DeepSpeed, the real forward and temperature) in each precision, both on
the initial weights. Per (generator dtype, learner precision): sampled tokens, KL from
generator to learner on them (k1: mean of behav - learner; k3), mean and max |logprob
difference|, the share over 0.1, and the extreme importance ratios pi_learner / pi_behav
that a correction would see (figures rounded to 6 decimals). It trains nothing and changes
no setting.

    python bench/learning/mismatch.py [--prompts 8] [--group 4] [--threads 2] [--out bench/learning/results/mismatch.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402
import numpy as np  # noqa: E402

from runtime.config import RunConfig, load  # noqa: E402

DTYPES = {"bf16": "bfloat16", "fp32": "float32"}
"Generator dtype / learner precision names of the same thing."


def prompts(cfg: RunConfig, count: int) -> list[str]:
    """The first `count` validation prompts of the trained domains, interleaved by domain."""
    from envs.intake import collect

    found, _ = collect(cfg.envs, seed=cfg.run.seed, split="validation")
    trained = [t for t, _ in found if cfg.envs.mix.get(t.domain, 0) > 0]
    if len(trained) < count:
        raise SystemExit(f"mismatch: only {len(trained)} validation tasks in the mix; ask for fewer --prompts")
    return [t.prompt for t in trained[:count]]


def generate(cfg: RunConfig, dtype: str, texts: list[str], group: int, seed: int) -> list[dict]:
    """Each prompt sampled `group` times with the torch engine in `dtype`: context ids,
    completion ids and the engine's logprobs."""
    from policy.engine import RowSettings, room_left
    from policy.torch_engine import TorchEngine

    gen_cfg = msgspec.structs.replace(cfg.generator, engine="torch", device="cpu", dtype=dtype,
                                      max_batch=max(cfg.generator.max_batch, group))
    engine = TorchEngine(gen_cfg, cfg.model, seed)
    rows = []
    for text in texts:
        context = engine.chat.prompt_ids(text)
        settings = RowSettings.of(cfg.generator.sampling, room_left(len(context), cfg.model.max_context))
        for result in engine.run_rows([context] * group, [settings] * group):
            rows.append({"context": context, "completion": list(result.token_ids),
                         "behav": list(result.logprobs), "finish": result.finish_reason})
    return rows


def recompute(cfg: RunConfig, precision: str, samples: dict[str, list[dict]]) -> dict[str, list[np.ndarray]]:
    """The learner's logprobs of every sampled token, per generator dtype, in `precision`."""
    import torch

    from policy.batch import TrainSample
    from policy.trainer import Trainer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0")
    lc = msgspec.structs.replace(cfg.learner, precision=precision, world_size=1, kl_coef=0.0,
                                 device="cpu", offload_optimizer=False)
    trainer = Trainer(msgspec.structs.replace(cfg, learner=lc).trainer,
                      Path(tempfile.mkdtemp(prefix="whet-mismatch-")))
    trainer.setup()
    out: dict[str, list[np.ndarray]] = {}
    try:
        for gen_dtype, rows in samples.items():
            out[gen_dtype] = []
            for row in rows:
                n, m = len(row["context"]), len(row["completion"])
                sample = TrainSample("v", "g", 0, 0.0, np.array(row["context"] + row["completion"], np.int64),
                                     np.r_[np.zeros(n, bool), np.ones(m, bool)],
                                     np.r_[np.zeros(n, np.float32), np.array(row["behav"], np.float32)])
                with torch.no_grad():
                    batch = trainer._tensors([sample])
                    logp = trainer._logprobs(trainer.engine, batch)[0].float().cpu().numpy()
                out[gen_dtype].append(logp[n - 1:n - 1 + m])
    finally:
        trainer.close()
    return out


def compare(behav: list[np.ndarray], learner: list[np.ndarray]) -> dict:
    """KL(generator || learner) on the sampled tokens (k1 and k3), |difference| figures and
    the extreme ratios pi_learner / pi_behav."""
    b, q = np.concatenate(behav).astype(np.float64), np.concatenate(learner).astype(np.float64)
    diff = q - b
    k3 = np.exp(diff) - diff - 1.0
    return {"tokens": int(len(b)), "kl_k1": round(float(np.mean(-diff)), 6),
            "kl_k3": round(float(np.mean(k3)), 6),
            "mean_abs_diff": round(float(np.mean(np.abs(diff))), 6),
            "max_abs_diff": round(float(np.max(np.abs(diff))), 6),
            "share_over_0.1": round(float(np.mean(np.abs(diff) > 0.1)), 6),
            "ratio_min": round(float(np.exp(diff.min())), 6),
            "ratio_max": round(float(np.exp(diff.max())), 6)}


def main(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    cfg = load(args.config)
    began, cpu0 = time.monotonic(), time.process_time()
    texts = prompts(cfg, args.prompts)
    samples = {name: generate(cfg, dtype, texts, args.group, args.seed) for name, dtype in DTYPES.items()}
    learned = {precision: recompute(cfg, precision, samples) for precision in DTYPES}
    pairs = {f"generator_{g}-learner_{p}": compare([np.array(r["behav"]) for r in samples[g]],
                                                    learned[p][g])
             for g in DTYPES for p in DTYPES}
    summary = {"config": os.path.relpath(args.config, ROOT), "model": cfg.model.name, "prompts": args.prompts,
               "group": args.group, "temperature": cfg.generator.sampling.temperature,
               "max_new_tokens": cfg.generator.sampling.max_new_tokens,
               "truncated": sum(r["finish"] == "length" for rows in samples.values() for r in rows),
               "threads": args.threads, "wall_s": round(time.monotonic() - began, 1),
               "cpu_s": round(time.process_time() - cpu0, 1), "pairs": pairs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    print(f"{'pair':28} {'tokens':>6} {'kl k1':>9} {'kl k3':>9} {'mean|d|':>8} {'max|d|':>8} "
          f"{'>0.1':>6} {'ratio min..max':>16}")
    for name, p in pairs.items():
        print(f"{name:28} {p['tokens']:6d} {p['kl_k1']:9.5f} {p['kl_k3']:9.5f} "
              f"{p['mean_abs_diff']:8.4f} {p['max_abs_diff']:8.4f} {p['share_over_0.1']:6.3f} "
              f"{p['ratio_min']:7.3f}..{p['ratio_max']:<7.3f}")
    return 0 if all(math.isfinite(p["kl_k3"]) for p in pairs.values()) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "default.toml"))
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench" / "learning" / "results" / "mismatch.json"))
    sys.exit(main(parser.parse_args()))
