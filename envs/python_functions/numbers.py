"""Arithmetic on integers: one operation at rung 0, piecewise rules and small number theory
higher up.

Consumes a seeded rng and a rung; produces a `FunctionSpec`. Piecewise rules take their
thresholds from the rng and are probed at and around every threshold.
"""

from __future__ import annotations

import random

from envs.phrasing import pick
from envs.python_functions.spec import FunctionSpec

INT_NAMES = ("n", "x", "num", "value", "k", "number")


def _ints(lo: int, hi: int, anchors: tuple[int, ...] = ()):
    def make(r: random.Random) -> list:
        if anchors and r.random() < 0.5:
            return [min(max(r.choice(anchors) + r.choice((-1, 0, 1)), lo), hi)]
        return [r.randint(lo, hi)]
    return make


def single_op(rng: random.Random, level: int) -> FunctionSpec:
    """Rung 0: one arithmetic operation on one integer."""
    p = pick(rng, INT_NAMES)
    k = rng.randint(2, 12)
    table = (
        (f"{p} + {k}", f"return `{p}` plus {k}", ("add_" + str(k), "plus_" + str(k))),
        (f"{p} * {k}", f"return `{p}` multiplied by {k}", ("times_" + str(k), "scale")),
        (f"{p} * {p}", f"return the square of `{p}`", ("square", "squared")),
        (f"{p} % 2 == 0", f"return True if `{p}` is even and False otherwise",
         ("is_even", "even")),
        (f"abs({p})", f"return the absolute value of `{p}`", ("absolute", "magnitude")),
        (f"{p} - {k}", f"return `{p}` minus {k}", ("minus_" + str(k), "decrease")),
        (f"{p} // {k}", f"return `{p}` divided by {k}, rounded down (integer division)",
         ("div_" + str(k), "floor_div")),
        (f"{p} > {k}", f"return True if `{p}` is greater than {k}, else False",
         ("above_" + str(k), "is_big")),
    )
    code, say, names = pick(rng, table)
    return FunctionSpec("numbers.single", pick(rng, names), [p], f"    return {code}\n", [say],
                        _ints(-20, 40, (k,)), edge_args=[[0], [k]])


def piecewise(rng: random.Random, level: int) -> FunctionSpec:
    """Rung n: a rule with n thresholds (n+1 branches), each branch a small expression."""
    p = pick(rng, INT_NAMES)
    cuts = sorted(rng.sample(range(-10, 60), min(level, 4)))
    exprs = [(f"{p} * {m}", f"{m} times `{p}`") for m in range(2, 6)] + \
            [(f"{p} + {a}", f"`{p}` plus {a}") for a in range(3, 12)] + \
            [(f"{p} - {a}", f"`{p}` minus {a}") for a in range(2, 9)] + \
            [(f"{p} // 2", f"half of `{p}` rounded down"), (f"-{p}", f"the negation of `{p}`")]
    chosen = rng.sample(exprs, len(cuts) + 1)
    lines, words = [], []
    for i, cut in enumerate(cuts):
        kw = "if" if i == 0 else "elif"
        lines.append(f"    {kw} {p} < {cut}:\n        return {chosen[i][0]}\n")
        lower = f"at least {cuts[i - 1]} and " if i else ""
        words.append(f"{lower}below {cut}, return {chosen[i][1]}")
    lines.append(f"    return {chosen[-1][0]}\n")
    words.append(f"otherwise ({p} >= {cuts[-1]}), return {chosen[-1][1]}")
    says = ["compute a value from `" + p + "` by these rules: if it is " + "; if it is ".join(
        words[:-1]) + "; " + words[-1]]
    name = pick(rng, ("tiered", "piecewise", "bracket_value", "rate", "score", "adjust"))
    return FunctionSpec(f"numbers.piecewise{len(cuts)}", name, [p], "".join(lines), says,
                        _ints(-15, 70, tuple(cuts)),
                        edge_args=[[c + d] for c in cuts for d in (-1, 0)])


_THEORY = {
    1: (
        ("digit_sum", "    total = 0\n    for d in str(abs({p})):\n        total += int(d)\n"
         "    return total\n", "return the sum of the decimal digits of `{p}` (ignore a minus sign)",
         (-999, 99999)),
        ("count_multiples", "    return len([i for i in range(1, {p} + 1) if i % {k} == 0])\n",
         "return how many of the numbers 1 to `{p}` (inclusive) are divisible by {k}", (0, 80)),
        ("sum_to", "    return sum(range(1, {p} + 1))\n",
         "return 1 + 2 + ... + `{p}` (0 when `{p}` is less than 1)", (-3, 60)),
    ),
    2: (
        ("is_prime", "    if {p} < 2:\n        return False\n    for d in range(2, {p}):\n"
         "        if {p} % d == 0:\n            return False\n    return True\n",
         "return True if `{p}` is a prime number, otherwise False", (-2, 60)),
        ("reverse_digits", "    return int(str({p})[::-1])\n",
         "return the non-negative integer `{p}` with its decimal digits reversed (120 gives 21)",
         (0, 9999)),
        ("divisor_count", "    return len([d for d in range(1, {p} + 1) if {p} % d == 0])\n",
         "return how many positive divisors `{p}` has (0 has none)", (0, 100)),
        ("factorial", "    out = 1\n    for i in range(2, {p} + 1):\n        out *= i\n    return out\n",
         "return the factorial of `{p}` (the factorial of 0 is 1)", (0, 12)),
    ),
    3: (
        ("collatz_steps", "    steps = 0\n    while {p} > 1:\n        {p} = {p} // 2 if {p} % 2 == 0"
         " else 3 * {p} + 1\n        steps += 1\n    return steps\n",
         "return how many Collatz steps take `{p}` down to 1 (halve even numbers, map odd n to 3n+1)",
         (1, 60)),
        ("digital_root", "    while {p} >= 10:\n        {p} = sum(int(d) for d in str({p}))\n    return {p}\n",
         "repeatedly replace `{p}` by the sum of its digits until one digit is left, and return it",
         (0, 99999)),
        ("fibonacci", "    a, b = 0, 1\n    for _ in range({p}):\n        a, b = b, a + b\n    return a\n",
         "return the `{p}`-th Fibonacci number, where fib(0) = 0 and fib(1) = 1", (0, 30)),
        ("ones_in_binary", "    return bin({p}).count('1')\n",
         "return how many 1 bits the binary form of `{p}` has", (0, 1024)),
        ("count_primes_below", "    return len([m for m in range(2, {p}) if all(m % d for d in range(2, m))])\n",
         "return how many prime numbers are smaller than `{p}`", (0, 80)),
    ),
}


def number_theory(rng: random.Random, level: int) -> FunctionSpec:
    """Rungs 1-3: digit, divisor and sequence functions of one integer."""
    p = pick(rng, ("n", "num", "value", "x"))
    k = rng.randint(2, 7)
    name, body, say, (lo, hi) = pick(rng, _THEORY[min(max(level, 1), 3)])
    return FunctionSpec(f"numbers.{name}", name, [p], body.format(p=p, k=k),
                        [say.format(p=p, k=k)], _ints(lo, hi, (lo, lo + 1, 10)),
                        edge_args=[[lo], [max(lo, 0) + 1]])
