"""SFT step time and peak RSS of the warm start on CPU: SmolLM2-135M, one batch of 8
demonstrations of about 1500 tokens (tool episodes: three assistant turns, two tool
results), through the learner's own ranks (`policy.ranks.RankGroup`, `Trainer.sft_step`)
with the default `[learner]` settings. Prints one JSON line; run it nice'd:

    OMP_NUM_THREADS=1 nice -n 15 .venv/bin/python bench/warmstart/sft_step.py --steps 2 \
        --micro-batch-size 2
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import anyio
import msgspec

from bus.messages import Demo, DemoMessage
from policy.chat import hf_chat_format
from policy.config import ModelConfig, TrainerConfig, WarmstartConfig
from policy.model import load_tokenizer
from policy.ranks import RankGroup
from policy.sft import demo_rows
from policy.warmstart import sft_trainer_config

STOP = "</tool_call>"


def episode(n: int, filler: int) -> Demo:
    code = "".join(f"def f{n}_{i}(x):\n    return x * {i} + {n}\n\n" for i in range(filler))
    call = '<tool_call>{"name": "write_file", "arguments": {"path": "a.py", "content": %s}}' % json.dumps(code)
    messages = [("user", f"Task {n}: fix a.py so the visible tests pass, then submit."),
                ("assistant", '<tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}' + STOP),
                ("tool", code), ("assistant", call + STOP), ("tool", "wrote a.py"),
                ("assistant", '<tool_call>{"name": "submit", "arguments": {}}' + STOP)]
    return Demo(task_id=f"bench/{n}", env="repository", domain="repository", split="train",
                level=0, messages=[DemoMessage(role=r, content=c) for r, c in messages],
                source="scripted")


async def main(steps: int, target: int, micro: int) -> dict:
    model = ModelConfig()
    chat = hf_chat_format(load_tokenizer(model))
    filler = 1
    while len(demo_rows([episode(0, filler)], chat, [STOP], 1 << 20).samples[0].ids) < target:
        filler += 1
    rows = demo_rows([episode(n, filler) for n in range(8)], chat, [STOP], 1 << 20).samples
    with tempfile.TemporaryDirectory() as tmp:
        trainer = TrainerConfig(model=model)
        trainer = msgspec.structs.replace(trainer, learner=msgspec.structs.replace(
            trainer.learner, micro_batch_size=micro))
        config = sft_trainer_config(trainer, WarmstartConfig(), Path(tmp))
        group = RankGroup(config, Path(tmp) / "checkpoint")
        await group.start()
        times = []
        try:
            for _ in range(steps):
                began = time.monotonic()
                stats = await group.call("sft_step", rows)
                times.append(round(time.monotonic() - began, 2))
        finally:
            await group.close()
    return {"model": model.name, "rows": len(rows), "tokens_per_row": [len(r.ids) for r in rows],
            "trained_tokens": int(stats["tokens"]), "micro_batch_size": config.learner.micro_batch_size,
            "precision": config.learner.precision, "step_s": times,
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=1500)
    parser.add_argument("--micro-batch-size", type=int, default=2,
                        help="Sequences per forward pass (the learner's default, 8, was killed "
                             "for memory on a 23 GiB machine at 8 x 1500 tokens)")
    args = parser.parse_args()
    print(json.dumps(anyio.run(main, args.steps, args.tokens, args.micro_batch_size)))
