"""Varied wording for generated prompts, so a policy cannot learn one format.

Consumes a seeded `random.Random` and the parts of a prompt; produces prompt text. Every
choice comes from `rng`, so a task's wording is as deterministic as its content. It knows
nothing about verification.
"""

from __future__ import annotations

import random
from typing import Sequence, TypeVar

T = TypeVar("T")


def pick(rng: random.Random, options: Sequence[T]) -> T:
    """One of `options`, chosen by `rng`."""
    return options[rng.randrange(len(options))]


_OPENERS = (
    "Write a Python function `{sig}`. It should {say}.",
    "Implement `{sig}` in Python. The function must {say}.",
    "Define `{sig}` so that it will {say}.",
    "Create a Python function named `{name}` that takes {args}. It should {say}.",
    "Your task: write `{sig}` to {say}.",
    "In Python, write a function `{sig}` which should {say}.",
    "Write `{sig}`: {say}.",
)

_EXAMPLE_STYLES = ("arrow", "doctest", "assert", "prose")

_ANSWER_PY = (
    "Answer with the complete function in a ```python code block.",
    "Put your solution in a single ```python code block.",
    "Reply with only the code, inside ```python fences.",
    "Give the full function definition in a ```python block.",
)


def argument_words(params: Sequence[str]) -> str:
    """'`a`', '`a` and `b`', '`a`, `b` and `c`'."""
    quoted = [f"`{p}`" for p in params]
    if len(quoted) <= 1:
        return "".join(quoted) or "no arguments"
    return ", ".join(quoted[:-1]) + " and " + quoted[-1]


def function_prompt(rng: random.Random, name: str, params: Sequence[str], say: str,
                    examples: Sequence[tuple[list, object]]) -> str:
    """A prompt asking for function `name(params)` that does `say` (imperative)."""
    sig = f"{name}({', '.join(params)})"
    opener = pick(rng, _OPENERS).format(sig=sig, name=name, say=say,
                                        args=argument_words(params))
    shown = _examples(rng, name, examples)
    return f"{opener}\n\n{shown}\n\n{pick(rng, _ANSWER_PY)}"


def _call(name: str, args: list) -> str:
    return f"{name}({', '.join(repr(a) for a in args)})"


def _examples(rng: random.Random, name: str, examples: Sequence[tuple[list, object]]) -> str:
    style = pick(rng, _EXAMPLE_STYLES)
    if style == "arrow":
        lines = [f"{_call(name, a)} -> {e!r}" for a, e in examples]
        return pick(rng, ("Examples:", "For example:", "Sample calls:")) + "\n" + "\n".join(lines)
    if style == "doctest":
        return "\n".join(f">>> {_call(name, a)}\n{e!r}" for a, e in examples)
    if style == "assert":
        lines = [f"assert {_call(name, a)} == {e!r}" for a, e in examples]
        return pick(rng, ("These must hold:", "Tests:", "It must pass:")) + "\n" + "\n".join(lines)
    return " ".join(f"`{_call(name, a)}` returns `{e!r}`." for a, e in examples)


_ANSWER_SCRIPT = (
    "Answer with the complete script in a ```python code block.",
    "Reply with the whole program inside ```python fences.",
    "Put the full script in one ```python block.",
)

_ANSWER_JSON = (
    "Answer with the JSON document only, in a ```json code block.",
    "Reply with just the JSON, inside ```json fences.",
    "Output the JSON object in a single ```json block and nothing else.",
)


def answer_script(rng: random.Random) -> str:
    """The closing line of a script task."""
    return pick(rng, _ANSWER_SCRIPT)


def answer_json(rng: random.Random) -> str:
    """The closing line of a structured-output task."""
    return pick(rng, _ANSWER_JSON)
