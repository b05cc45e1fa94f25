"""Benchmark: do whetstone's generator and TRL's `generate` sample alike from the same weights?

    PYTHONPATH=. python bench/vs_trl/sampler_parity.py SEED_DIR/config.json \\
        --per-domain 8 --n 8 [--samplers hf,whetstone,whetstone_fp32] --out FILE

Consumes a `vs_trl.py` seed config (its training task list, `[generator.sampling]`); takes the
first `--per-domain` gated training tasks of each domain and samples `--n` training answers
to each from the initial weights with each sampler: `hf` (transformers' `generate` in
float32 with TRL's arguments: do_sample, temperature, top_p, top_k 0, the token limit, the
stop strings), `whetstone` (the torch engine the generator runs, at its configured dtype) and
`whetstone_fp32` (the same engine in float32). Every answer is judged by the reward TRL's
side trains on (`trl_reward.JudgeReward`). Produces JSON: per sampler its answers' mean
length, those that reached the token limit, mean reward and passes, by domain and each
task's mean reward. It trains nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

Answer = tuple  # (task, completion ids, text)


def hf_answers(cfg, tasks: list, n: int) -> list[Answer]:
    """`n` answers per task from transformers' `generate`, float32, as TRL calls it."""
    import torch

    from policy.chat import hf_chat_format
    from policy.model import load_model, load_tokenizer

    gen = cfg.generator.sampling
    tokenizer = load_tokenizer(cfg.model)
    model = load_model(cfg.model, "float32").eval()
    chat = hf_chat_format(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    torch.manual_seed(cfg.run.seed)
    out = []
    for task in tasks:
        ids = torch.tensor([chat.prompt_ids(task.prompt)])
        with torch.no_grad():
            rows = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                  temperature=gen.temperature, top_p=gen.top_p, top_k=0,
                                  max_new_tokens=gen.max_new_tokens, stop_strings=list(gen.stop),
                                  tokenizer=tokenizer, num_return_sequences=n, pad_token_id=pad)
        for row in rows[:, ids.shape[1]:].tolist():
            while row and row[-1] == pad:  # the padding after a row that ended early
                row.pop()
            out.append((task, row, tokenizer.decode(row, skip_special_tokens=True)))
    return out


async def engine_answers(cfg, tasks: list, n: int, dtype: str) -> list[Answer]:
    """`n` answers per task from the generator's torch engine (`dtype`, '' for its own)."""
    import anyio

    from policy.engine import RowSettings, SampleRequest, room_left
    from policy.torch_engine import TorchEngine

    gen = cfg.generator.sampling
    engine = await anyio.to_thread.run_sync(TorchEngine, cfg.generator, cfg.model, cfg.run.seed)
    out = []
    async with anyio.create_task_group() as tg:
        await tg.start(engine.serve)
        for task in tasks:
            prompt = engine.chat.prompt_ids(task.prompt)
            s = RowSettings.of(gen, room_left(len(prompt), cfg.model.max_context))
            s = RowSettings(s.temperature, s.top_p, s.max_new_tokens, s.stop, s.include_stop,
                            dtype or s.dtype)
            for sample in await engine.generate(SampleRequest(prompt, n, s)):
                out.append((task, list(sample.token_ids), sample.text))
        tg.cancel_scope.cancel()
    return out


def figures(answers: list[Answer], rewards: list, limit: int) -> dict:
    """Mean length, answers at the token limit, mean reward (of those with one)."""
    scored = [r for r in rewards if r is not None]
    lengths = [len(a[1]) for a in answers]
    return {"answers": len(answers), "mean_length": round(statistics.mean(lengths), 1),
            "at_limit": sum(n >= limit for n in lengths),
            "reward": round(statistics.mean(scored), 4) if scored else None}


def main(argv: list[str] | None = None) -> int:
    import anyio
    import torch

    from bench.vs_trl.task_list import gated_train_tasks
    from bench.vs_trl.trl_reward import JudgeReward, task_column
    from policy.model import load_tokenizer
    from runtime.config import load

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", type=Path)
    p.add_argument("--per-domain", type=int, default=8)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--samplers", default="hf,whetstone,whetstone_fp32")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    cfg = load(str(args.config))
    gen = cfg.generator.sampling
    by_domain, _ = anyio.run(gated_train_tasks, cfg)
    tasks = [t for d in sorted(by_domain) for t in by_domain[d][:args.per_domain]]
    out = {"config": str(args.config), "tasks": len(tasks), "n": args.n,
           "sampling": {"temperature": gen.temperature, "top_p": gen.top_p,
                        "max_new_tokens": gen.max_new_tokens, "stop": list(gen.stop)},
           "samplers": {}}
    with JudgeReward(cfg.judge, cfg.executor.sandbox, concurrency=cfg.executor.concurrency,
                     max_new_tokens=gen.max_new_tokens, stops=tuple(gen.stop),
                     eos_id=load_tokenizer(cfg.model).eos_token_id) as reward:
        for name in args.samplers.split(","):
            began = time.monotonic()
            answers = (hf_answers(cfg, tasks, args.n) if name == "hf" else anyio.run(
                engine_answers, cfg, tasks, args.n, "float32" if name == "whetstone_fp32" else ""))
            seconds = time.monotonic() - began
            reward.outcomes.clear()
            rewards = reward([None] * len(answers), [a[2] for a in answers],
                             task_json=[task_column(a[0]) for a in answers],
                             completion_ids=[a[1] for a in answers])
            out["samplers"][name] = {
                **figures(answers, rewards, gen.max_new_tokens), "sampling_wall_s": round(seconds, 1),
                "outcomes": dict(reward.outcomes),
                "by_domain": {d: figures([a for a in answers if a[0].domain == d],
                                         [r for a, r in zip(answers, rewards) if a[0].domain == d],
                                         gen.max_new_tokens) for d in sorted(by_domain)},
                "per_task_reward": {t.task_id: figures(
                    [a for a in answers if a[0] is t],
                    [r for a, r in zip(answers, rewards) if a[0] is t], gen.max_new_tokens)["reward"]
                    for t in tasks}}
            print(name, json.dumps({k: v for k, v in out["samplers"][name].items()
                                    if k != "per_task_reward"}), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
