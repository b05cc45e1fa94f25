"""Prefix cache: a fixed 5-turn tool episode on the torch engine with the cache on and off.

Consumes SmolLM2-135M (the torch engine, CPU) and repository tasks (`envs.repository`, seed
23: their prompts, and their files as the tool outputs); plays `--episodes` episodes side by
side, one batch a turn: the model's greedy completion (stopping at `</tool_call>`), then the
same fixed tool outputs a few hundred tokens long (a test file read, a failing test run, a
source file read, a second run), each turn's context built from ids as the generator builds
it. The same episodes are played with `prefix_cache_mb` 0 and then on, in one process.
Writes per turn: context tokens, tokens prefilled, new tokens, seconds and new tokens/s for
each, and the ratios. A measurement, not a test; a few minutes.

    PYTHONPATH=. python bench/repository/prefix_cache.py [--threads 1] [--episodes 1]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from envs.environment import generate
from envs.repository import ENVIRONMENT
from policy.config import GeneratorConfig, ModelConfig
from policy.engine import RowSettings
from policy.torch_engine import TorchEngine

RUN_TESTS = """FAILED tests/test_store.py::TestCart::test_team_customer_gets_tier_discount
================================== FAILURES ===================================
______________ TestCart.test_team_customer_gets_tier_discount ______________
self = <tests.test_store.TestCart testMethod=test_team_customer_gets_tier_discount>

    def test_team_customer_gets_tier_discount(self):
        cart = Cart(customer=Customer(name="acme", kind="team", tier=2))
        cart.add(Item("widget", Money(1999)), quantity=3)
        cart.add(Item("gadget", Money(4550)), quantity=1)
>       self.assertEqual(cart.total(), Money(9302))
E       AssertionError: Money(cents=10547) != Money(cents=9302)

tests/test_store.py:41: AssertionError
=========================== short test summary info ===========================
FAILED tests/test_store.py::TestCart::test_team_customer_gets_tier_discount - AssertionError
FAILED tests/test_store.py::TestReceipt::test_receipt_lists_the_discount - AssertionError
========================= 2 failed, 9 passed in 0.41s =========================
"""


def numbered(text: str) -> str:
    """A file as `read_file` shows it."""
    return "".join(f"{i:4d} {line}\n" for i, line in enumerate(text.splitlines(), 1))


def tool_outputs(task) -> list[str]:
    """The four fixed tool outputs that follow turns 1-4."""
    tests = next(p for p in task.files if p.startswith("tests/test_"))
    source = max((p for p in task.files if not p.startswith("tests/")), key=lambda p: len(task.files[p]))
    return [numbered(task.files[tests]), RUN_TESTS, numbered(task.files[source]),
            RUN_TESTS.replace("2 failed, 9 passed", "1 failed, 10 passed")]


def play(engine: TorchEngine, prompts: list[list[int]], outputs: list[list[str]],
         settings: RowSettings) -> list[dict]:
    """One batch a turn, five turns; what each turn took."""
    contexts = [list(p) for p in prompts]
    turns = []
    for turn in range(5):
        stats = engine.prefixes.stats
        prefilled, began = stats.prefilled_tokens, time.perf_counter()
        results = engine.run_rows(contexts, [settings] * len(contexts))
        seconds = time.perf_counter() - began
        new = sum(len(r.token_ids) for r in results)
        turns.append(dict(turn=turn + 1, context=sum(map(len, contexts)),
                          prefilled=stats.prefilled_tokens - prefilled, new=new,
                          seconds=round(seconds, 2), tokens_per_s=round(new / seconds, 1),
                          completions=[r.token_ids for r in results]))
        if turn < 4:
            contexts = [c + r.token_ids + engine.chat.feedback_ids(
                o[turn], engine.chat.closes(r.token_ids, r.finish_reason), "tool")
                for c, r, o in zip(contexts, results, outputs)]
    return turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--episodes", type=int, default=1, help="episodes played side by side")
    parser.add_argument("--max-new", type=int, default=64, help="most tokens a turn samples")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = TorchEngine(GeneratorConfig(dtype=args.dtype, prefix_cache_mb=512),
                         ModelConfig(name="smollm2-135m"), 0)
    tasks = list(generate(ENVIRONMENT, args.episodes, seed=23))
    prompts = [engine.chat.prompt_ids(t.prompt) for t in tasks]
    outputs = [tool_outputs(t) for t in tasks]
    settings = RowSettings(0.0, 1.0, args.max_new, ("</tool_call>",), True)
    play(engine, prompts[:1], outputs[:1], RowSettings(0.0, 1.0, 4))  # warm-up
    budget = engine.prefixes.max_bytes
    engine.prefixes.max_bytes = 0
    off = play(engine, prompts, outputs, settings)
    engine.prefixes.max_bytes = budget
    on = play(engine, prompts, outputs, settings)
    same = all(a.pop("completions") == b.pop("completions") for a, b in zip(off, on))
    lines = [f"prefix cache, SmolLM2-135M {engine.dtype}, {args.threads} thread(s), "
             f"{args.episodes} episode(s) a batch, at most {args.max_new} new tokens a turn, "
             f"load average at start {os.getloadavg()[0]:.2f}",
             f"tool outputs (tokens): {[len(engine.chat.encode(o)) for o in outputs[0]]}",
             f"same completions with the cache on and off: {same}",
             "turn | context | prefilled off / on | new | s off / on | tokens/s off / on | speed-up"]
    for a, b in zip(off, on):
        lines.append(f"{a['turn']} | {a['context']} | {a['prefilled']} / {b['prefilled']} | "
                     f"{a['new']} / {b['new']} | {a['seconds']} / {b['seconds']} | "
                     f"{a['tokens_per_s']} / {b['tokens_per_s']} | "
                     f"{a['seconds'] / b['seconds']:.2f}x")
    total = {k: (sum(t[k] for t in off), sum(t[k] for t in on)) for k in ("prefilled", "new", "seconds")}
    lines.append(f"episode: prefilled {total['prefilled'][0]} / {total['prefilled'][1]} tokens "
                 f"({1 - total['prefilled'][1] / total['prefilled'][0]:.0%} saved), "
                 f"{total['seconds'][0]:.1f} / {total['seconds'][1]:.1f} s, new tokens/s "
                 f"{total['new'][0] / total['seconds'][0]:.1f} / {total['new'][1] / total['seconds'][1]:.1f}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n" + json.dumps(dict(off=off, on=on)) + "\n")


if __name__ == "__main__":
    main()
