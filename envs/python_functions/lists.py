"""List-of-integers transforms: a pipeline of steps whose length is the difficulty.

Consumes a seeded rng and a rung; produces a `FunctionSpec`. Rung 0 is one reduction
("return the sum of `nums`"), rung n chains n filter/map/reorder/slice steps before it.
Inputs are drawn around the constants the steps use, so boundary mistakes show.
"""

from __future__ import annotations

import random

from envs.phrasing import pick
from envs.python_functions.spec import FunctionSpec

LIST_NAMES = ("nums", "numbers", "values", "xs", "items", "data", "arr", "seq")


def _filters(rng: random.Random) -> list[tuple[str, str, str, int]]:
    k = rng.randint(-3, 6)
    m = rng.choice((2, 3, 4, 5))
    return [
        ("filter", f"[x for x in r if x > {k}]", f"keep only the numbers greater than {k}", k),
        ("filter", f"[x for x in r if x < {k}]", f"keep only the numbers less than {k}", k),
        ("filter", f"[x for x in r if x >= {k}]", f"drop every number below {k}", k),
        ("filter", "[x for x in r if x % 2 == 0]", "keep only the even numbers", 0),
        ("filter", "[x for x in r if x % 2 == 1]", "keep only the odd numbers", 0),
        ("filter", f"[x for x in r if x % {m} == 0]", f"keep only the multiples of {m}", m),
        ("filter", f"[x for x in r if x != {k}]", f"remove every occurrence of {k}", k),
    ]


def _maps(rng: random.Random) -> list[tuple[str, str, str, int]]:
    k = rng.randint(2, 9)
    return [
        ("map", f"[x + {k} for x in r]", f"add {k} to each number", 0),
        ("map", f"[x - {k} for x in r]", f"subtract {k} from each number", k),
        ("map", f"[x * {k} for x in r]", f"multiply each number by {k}", 0),
        ("map", "[x * x for x in r]", "square each number", 0),
        ("map", "[abs(x) for x in r]", "replace each number by its absolute value", 0),
        ("map", f"[x % {k} for x in r]", f"replace each number by its remainder modulo {k}", k),
        ("map", "[-x for x in r]", "negate each number", 0),
    ]


def _orders(rng: random.Random) -> list[tuple[str, str, str, int]]:
    k = rng.randint(1, 4)
    return [
        ("order", "sorted(r)", "sort them in ascending order", 0),
        ("order", "sorted(r, reverse=True)", "sort them from largest to smallest", 0),
        ("order", "r[::-1]", "reverse their order", 0),
        ("slice", f"r[:{k}]", f"keep only the first {k} of them", k),
        ("slice", f"r[{k}:]", f"drop the first {k} of them", k),
        ("slice", f"r[-{k}:]", f"keep only the last {k} of them", k),
        ("dedupe", "list(dict.fromkeys(r))",
         "remove repeated numbers, keeping the first occurrence of each", 0),
    ]


_TERMINALS = (
    ("r", "return the resulting list", True),
    ("sum(r)", "return their sum", False),
    ("len(r)", "return how many numbers are left", False),
    ("max(r) if r else 0", "return the largest one (0 if none are left)", False),
    ("min(r) if r else 0", "return the smallest one (0 if none are left)", False),
)

_SINGLE = (
    ("sum(r)", "return the sum of `{p}`", "sum_list", "total"),
    ("max(r) if r else 0", "return the largest number in `{p}`, or 0 if it is empty",
     "largest", "max_value"),
    ("len([x for x in r if x > 0])", "return how many numbers in `{p}` are positive",
     "count_positive", "positives"),
    ("r[::-1]", "return `{p}` in reverse order", "reverse_list", "reversed_items"),
    ("sorted(r)", "return `{p}` sorted in ascending order", "sort_numbers", "ascending"),
    ("[x * 2 for x in r]", "return a new list with every number in `{p}` doubled",
     "double_all", "doubled"),
    ("r[0] if r else None", "return the first number in `{p}`, or None if it is empty",
     "first_item", "head"),
    ("len(r)", "return how many numbers `{p}` has", "count_items", "length"),
)


def _make_args(rng: random.Random, anchors: list[int]):
    def make(r: random.Random) -> list:
        n = r.randint(0, 9)
        pool = [a + d for a in anchors for d in (-1, 0, 1)] or [0]
        xs = [r.choice(pool) if r.random() < 0.35 else r.randint(-9, 12) for _ in range(n)]
        if xs and r.random() < 0.3:
            xs.append(r.choice(xs))  # repeats matter for dedupe and counting
        return [xs]
    return make


def _name(rng: random.Random, steps: list[tuple[str, str, str, int]]) -> str:
    verbs = ("process", "transform", "reduce", "crunch", "apply_rules", "pipeline", "filter_map")
    nouns = ("numbers", "list", "values", "data", "items")
    return f"{pick(rng, verbs)}_{pick(rng, nouns)}" if steps else pick(rng, nouns)


def list_pipeline(rng: random.Random, level: int) -> FunctionSpec:
    """Rung 0: one reduction; rung n: n steps then a terminal."""
    param = pick(rng, LIST_NAMES)
    if level == 0:
        code, say, *names = pick(rng, _SINGLE)
        body = f"    r = {param}\n    return {code}\n"
        return FunctionSpec("lists.single", pick(rng, names), [param], body,
                            [say.format(p=param)], _make_args(rng, []),
                            edge_args=[[[]], [[0]]])
    steps = _choose_steps(rng, level)
    term_code, term_say, _ = _terminal(rng, steps)
    lines = [f"    r = {param}\n"] + [f"    r = {code}\n" for _, code, _, _ in steps]
    body = "".join(lines) + f"    return {term_code}\n"
    ablations = ["".join(lines[:i + 1] + lines[i + 2:]) + f"    return {term_code}\n"
                 for i in range(len(steps))]
    said = ", then ".join(say for _, _, say, _ in steps)
    says = [f"take the numbers in `{param}`, {said}, and {term_say}",
            f"start from `{param}`: {said}; finally {term_say}"]
    anchors = [a for *_, a in steps]
    return FunctionSpec(f"lists.pipeline{len(steps)}", _name(rng, steps), [param], body, says,
                        _make_args(rng, anchors), edge_args=[[[]], [[anchors[0]]]],
                        ablations=ablations)


def _choose_steps(rng: random.Random, level: int) -> list[tuple[str, str, str, int]]:
    steps: list[tuple[str, str, str, int]] = []
    used: set[str] = set()
    for _ in range(min(level, 3)):
        group = rng.choice(("filter", "map", "order") if len(steps) else ("filter", "map"))
        options = {"filter": _filters, "map": _maps, "order": _orders}[group](rng)
        options = [o for o in options if o[0] not in used]
        if not options:
            options = [o for o in _maps(rng) if o[1] not in {s[1] for s in steps}]
        step = rng.choice(options)
        used.add(step[0])
        steps.append(step)
    return steps


def _terminal(rng: random.Random, steps) -> tuple[str, str, bool]:
    if any(kind in ("order", "slice", "dedupe") for kind, *_ in steps[-1:]):
        # an order step right before an order-blind reduction would be dead code
        return _TERMINALS[0] if steps[-1][0] == "order" else pick(rng, _TERMINALS)
    return pick(rng, _TERMINALS)
