"""Environment `python_functions`: write a Python function from a description and examples.

Consumes a seeded rng and a rung; produces `python_io` Drafts. Families cover list, string
and arithmetic transforms, parsing and small algorithms. Difficulty: the number of chained
steps in a transform, the number of branches of a piecewise rule, and which families are
open at a rung (parsing from rung 2, algorithms from rung 2 to 4). It does not run attempts.
"""

from __future__ import annotations

import random
from typing import Callable

from envs.environment import Draft, Environment
from envs.python_functions import algorithms, lists, numbers, parsing, strings
from envs.python_functions.spec import FunctionSpec, Redundant, to_draft

Family = Callable[[random.Random, int], FunctionSpec]

LADDER: dict[int, tuple[Family, ...]] = {
    0: (lists.list_pipeline, strings.string_pipeline, numbers.single_op),
    1: (lists.list_pipeline, strings.string_pipeline, numbers.piecewise, numbers.number_theory),
    2: (lists.list_pipeline, strings.string_pipeline, numbers.piecewise, numbers.number_theory,
        parsing.key_values, parsing.clock_minutes, parsing.numbers_in_text,
        algorithms.small_algorithm),
    3: (lists.list_pipeline, strings.string_pipeline, numbers.piecewise, numbers.number_theory,
        parsing.clock_minutes, parsing.numbers_in_text, parsing.record_fields,
        algorithms.small_algorithm),
    4: (strings.string_pipeline, numbers.piecewise, parsing.key_values, parsing.record_fields,
        algorithms.small_algorithm, algorithms.small_algorithm),
}
"Families open at each rung."


def make_task(rng: random.Random, level: int) -> Draft:
    """One function-synthesis task at `level`; retries draws whose steps would be dead code."""
    families = LADDER[min(max(level, 0), max(LADDER))]
    problem: Exception | None = None
    for _ in range(30):
        family = families[rng.randrange(len(families))]
        try:
            return to_draft(family(rng, level), rng)
        except Redundant as exc:
            problem = exc
    raise RuntimeError(f"python_functions: no usable task at level {level}: {problem}")


ENVIRONMENT = Environment(
    name="python_functions",
    version="1",
    domain="python",
    summary="Write a Python function from a description and examples (python_io).",
    levels=len(LADDER),
    difficulty="steps chained in a transform, branches of a rule, parsing and algorithm "
               "families from rung 2",
    make_task=make_task,
)
