"""A tiny example environment: sum the digits of a number that exceed a threshold.

Consumes a seeded rng and a rung; produces `python_io` Drafts. Copy this file to add your
own environment: one module, one `ENVIRONMENT`, one `[envs.use.<name>]` entry in config.
Difficulty: the numbers get more digits on higher rungs.
"""

from __future__ import annotations

import json
import random

from bus.messages import Verifier
from envs.environment import Draft, Environment


def make_task(rng: random.Random, level: int) -> Draft:
    """One task at rung `level`; every random choice comes from `rng`."""
    k, digits = rng.randint(0, 6), 2 + 2 * level
    reference = f"def digit_sum(n):\n    return sum(int(d) for d in str(n) if int(d) > {k})\n"
    scope: dict = {}
    exec(reference, scope)  # our own reference computes the expected values
    numbers = [rng.randrange(10 ** digits) for _ in range(12)] + [k * 11, (k + 1) * 111]
    cases = [{"args": [n], "expected": scope["digit_sum"](n)} for n in numbers]
    prompt = (f"Write a Python function `digit_sum(n)` that returns the sum of the decimal "
              f"digits of the non-negative integer `n` that are greater than {k}.\n\n"
              f"Example: digit_sum({numbers[0]}) -> {cases[0]['expected']}\n\n"
              "Answer with the function in a ```python code block.")
    verifier = Verifier(kind="python_io", visible=json.dumps(cases[:1]),
                        hidden=json.dumps(cases[1:]), reference=reference)
    return Draft(prompt=prompt, verifier=verifier, entry_point="digit_sum", family="digit_sum")


ENVIRONMENT = Environment(
    name="digit_sum",
    version="1",
    domain="arithmetic",
    summary="Sum the digits of a number above a threshold (example environment).",
    levels=3,
    difficulty="more digits per number",
    make_task=make_task,
)
