"""Benchmark: the generator's engine against bare transformers `generate`, and inside a run.

Consumes a run config (model, generator dtype and sampling; default configs/default.toml),
the training prompts of its environments, and optionally a finished run directory. In one
process, with the same prompts, batch, dtype, threads, temperature and token limit, it times:

- bare: `model.generate(do_sample=..., max_new_tokens=...)`, batches of `--batch`;
- engine: whetstone's torch engine (`TorchEngine.run_rows`: KV cache, per-row settings,
  logprobs, stop strings) on the same batches;
- in the run (with `--run DIR`): the tokens/s the run's generator logged for its batches
  (`generator.batch_completed`), split into training and held-out work by dtype.

Prints tokens/s and the ratios engine/bare and run/bare; `--out` writes them as JSON. Both
sides count the tokens sampled up to each row's end (end of turn, stop string or limit).
`--eval` times the held-out rounds' sampling (`[generator.eval_sampling]`, its dtype) instead
of training's; `--busy` runs a one-thread torch loop beside it the whole time (the learner's
share of the cores while it trains), to see what a thread count costs under contention.

    python bench/learning/generator_bench.py [--config configs/default.toml] [--batch 16]
        [--batches 3] [--threads 2] [--eval] [--busy] [--run runs/<id>]
        [--out bench/learning/results/generator.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def prompts_of(cfg, count: int) -> list[str]:
    """Training prompts of the run's environments, interleaved, without gating."""
    from envs.intake import collect

    tasks, _ = collect(cfg.envs, seed=cfg.run.seed, split="train")
    return [t.prompt for t, _ in tasks if cfg.envs.mix.get(t.domain, 0) > 0][:count]


def bare(model, tok, prompts: list[str], settings, batch: int) -> tuple[int, float]:
    """Tokens sampled and seconds, with transformers' own generate."""
    import torch

    tok.padding_side = "left"
    tokens, seconds = 0, 0.0
    for i in range(0, len(prompts), batch):
        texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                         add_generation_prompt=True) for p in prompts[i:i + batch]]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        sample = dict(do_sample=True, temperature=settings.temperature) if settings.temperature > 0 \
            else dict(do_sample=False)
        began = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=settings.max_new_tokens,
                                 pad_token_id=tok.eos_token_id, stop_strings=list(settings.stop) or None,
                                 tokenizer=tok, **sample)
        seconds += time.perf_counter() - began
        new = out[:, enc["input_ids"].shape[1]:]
        for row in new.tolist():  # up to and including the end of turn, as the engine counts
            cut = next((n + 1 for n, t in enumerate(row) if t == tok.eos_token_id), len(row))
            tokens += cut
    return tokens, seconds


def engine_side(engine, prompts: list[str], settings, batch: int) -> tuple[int, float]:
    """Tokens sampled and seconds, with whetstone's torch engine."""
    tokens, seconds = 0, 0.0
    for i in range(0, len(prompts), batch):
        contexts = [engine.chat.prompt_ids(p) for p in prompts[i:i + batch]]
        began = time.perf_counter()
        rows = engine.run_rows(contexts, [settings] * len(contexts))
        seconds += time.perf_counter() - began
        tokens += sum(len(r.token_ids) for r in rows)
    return tokens, seconds


def in_run(run_dir: Path) -> dict[str, float]:
    """Tokens/s of the run's generator batches, by weights dtype (training, held-out)."""
    events = []
    for path in sorted((run_dir / "logs").glob("generator-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "generator.batch_completed":
                events.append(e["fields"])
    out = {}
    split = {"all": events, "training": [e for e in events if e.get("dtype", "engine") == "engine"],
             "heldout_other_dtype": [e for e in events if e.get("dtype", "engine") != "engine"]}
    for key, rows in split.items():
        tokens, seconds = sum(r["tokens"] for r in rows), sum(r["seconds"] for r in rows)
        out[f"{key}_tokens_per_s"] = round(tokens / seconds, 1) if seconds else None
        out[f"{key}_batches"] = len(rows)
        out[f"{key}_mean_rows"] = round(statistics.fmean(r["sequences"] for r in rows), 1) if rows else None
    return out


BUSY = ("import torch; torch.set_num_threads(1); a = torch.randn(512, 512)\n"
        "while True: a = torch.tanh(a @ a)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs/default.toml"))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval", action="store_true", help="time [generator.eval_sampling]")
    ap.add_argument("--busy", action="store_true", help="a one-thread torch loop beside it")
    ap.add_argument("--run", default="")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    import torch

    from policy.engine import RowSettings
    from policy.model import load_model, load_tokenizer
    from policy.precision import weights_dtype
    from policy.torch_engine import TorchEngine
    from runtime.config import load as load_config

    torch.set_num_threads(args.threads)
    cfg = load_config(Path(args.config))
    sampling = cfg.generator.eval_sampling if args.eval else cfg.generator.sampling
    dtype = weights_dtype(getattr(sampling, "dtype", None) or cfg.generator.dtype, "cpu")
    settings = RowSettings.of(sampling)
    prompts = prompts_of(cfg, args.batch * args.batches)
    engine = TorchEngine(cfg.generator, cfg.model, cfg.run.seed)
    model, tok = load_model(cfg.model, dtype), load_tokenizer(cfg.model)
    runs = {"bare": [], "engine": []}
    busy = subprocess.Popen([sys.executable, "-c", BUSY]) if args.busy else None
    try:
        for _ in range(2):  # alternate, after a warm-up batch each
            for name, fn in (("bare", lambda: bare(model, tok, prompts, settings, args.batch)),
                             ("engine", lambda: engine_side(engine, prompts, settings, args.batch))):
                tokens, seconds = fn()
                runs[name].append(tokens / seconds)
    finally:
        if busy is not None:
            busy.kill()
    result = {"dtype": str(dtype), "threads": args.threads, "batch": args.batch,
              "sampling": "eval" if args.eval else "train", "busy_beside": args.busy,
              "prompts": len(prompts), "temperature": settings.temperature,
              "max_new_tokens": settings.max_new_tokens, "stop": list(settings.stop),
              "bare_tokens_per_s": round(statistics.median(runs["bare"]), 1),
              "engine_tokens_per_s": round(statistics.median(runs["engine"]), 1)}
    result["engine_vs_bare"] = round(result["engine_tokens_per_s"] / result["bare_tokens_per_s"], 3)
    if args.run:
        result["run"] = in_run(Path(args.run))
        got = result["run"]["training_tokens_per_s"]
        result["run_vs_bare"] = round(got / result["bare_tokens_per_s"], 3) if got else None
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
