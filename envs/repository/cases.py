"""Test cases of a repository project: calls of every public function, their expected values
on the reference, and the visible unittest file.

Consumes a `Project` (trusted code: the generator's own templates) and a seeded rng;
produces cases `{"args": ["module:function", *args], "expected": value, "breaks": bool}`
(`breaks`: the defective workspace gets it wrong), the split into visible and hidden cases,
and the text of the visible test file. It runs the project in this process through
`judging.repo.loaded`, never model code.
"""

from __future__ import annotations

import random

from envs.repository.shop import Project
from judging import repo

PRICES = (0.29, 0.57, 1.15, 4.35, 19.99, 2.5, 0.07, 12.0)
"Prices whose float cents are just below a whole number catch truncation."


def _calls(p: Project, rng: random.Random) -> list[list]:
    pkg, (low, mid, high), bulk = p.package, p.tiers, p.bulk_cents
    money = p.reference[f"{pkg}/money.py"]
    rate_first = "def apply_rate(rate_percent, cents)" in money
    fmt = "format_amount" if "def format_amount" in money else "format_cents"
    total_first = "def discount_rate(total_cents, tier)" in p.reference[f"{pkg}/discounts.py"]
    calls = [[f"{pkg}.money:to_cents", price] for price in rng.sample(PRICES, 5)]
    for cents, rate in ((1000, 10), (999, 15), (12345, 0), (250, 7)):
        calls.append([f"{pkg}.money:apply_rate", *((rate, cents) if rate_first else (cents, rate))])
    calls += [[f"{pkg}.money:{fmt}", c] for c in (1205, 5, -250, -1, 0, 100007)]
    for tier in (low, mid, high, "unknown"):
        for total in (100, bulk - 1, bulk, bulk + 5000):
            calls.append([f"{pkg}.discounts:discount_rate", *((total, tier) if total_first else (tier, total))])
    item = lambda price, qty: {"name": rng.choice("abcdefgh") * 3, "price": price, "qty": qty}  # noqa: E731
    calls += [[f"{pkg}.cart:line_total", item(pr, q)] for pr, q in ((1.15, 3), (4.35, 0), (2.5, -2))]
    carts = [[item(bulk / 100, 1)], [item(0.29, 3), item(1.15, 2)], [item(19.99, 2), item(2.5, -1)],
             [item(bulk / 200, 2), item(4.35, 1)], [item(0.57, 4)]]
    for cart in carts:
        for tier in rng.sample((low, mid, high), 2) + [high]:
            calls.append([f"{pkg}.cart:cart_total", cart, tier])
    calls += [[f"{pkg}.receipt:receipt_line", cart, rng.choice((low, mid, high))] for cart in carts[:3]]
    unique = {repr(c): c for c in calls}
    return list(unique.values())


def _outcome(call, target: str, args: list):
    try:
        return "ok", call(target, *args)
    except Exception as exc:  # noqa: BLE001 - a defect's exception is an outcome
        return "error", type(exc).__name__


def make_cases(p: Project, rng: random.Random) -> list[dict]:
    """Every case, with its expected value and whether the defect breaks it."""
    calls = _calls(p, rng)
    with repo.loaded(p.reference) as call:
        good = [_outcome(call, c[0], c[1:]) for c in calls]
    with repo.loaded(p.broken) as call:
        bad = [_outcome(call, c[0], c[1:]) for c in calls]
    cases = []
    for args, (status, value), broken in zip(calls, good, bad):
        if status != "ok":
            raise AssertionError(f"the reference raised {value} on {args}")
        cases.append({"args": args, "expected": value, "breaks": broken != (status, value)})
    if not any(c["breaks"] for c in cases):
        raise AssertionError(f"no case catches the defect {p.defect.kind} ({p.defect.symptom})")
    return cases


def choose_visible(cases: list[dict], rng: random.Random) -> tuple[list[dict], list[dict]]:
    """Visible: two cases the defect breaks (calls of the outermost functions first) and two
    it does not; hidden: the rest."""
    def outer(c: dict) -> int:
        return -("cart:" in c["args"][0] or "receipt:" in c["args"][0])
    broken = sorted((c for c in cases if c["breaks"]), key=outer)
    fine = [c for c in cases if not c["breaks"] and outer(c)]
    picked = broken[:2] + rng.sample(fine, min(2, len(fine)))
    ids = {id(c) for c in picked}
    return picked, [c for c in cases if id(c) not in ids]


def unittest_file(pkg: str, visible: list[dict]) -> str:
    """The visible test suite: one unittest method per visible case."""
    lines = ['"""Tests of the package (run: python3 -m unittest discover -s tests -t .)."""',
             "", "import unittest", "", "", f"class Test{pkg.capitalize()}(unittest.TestCase):"]
    for i, case in enumerate(visible):
        target, *args = case["args"]
        module, _, name = target.partition(":")
        shown = ", ".join(repr(a) for a in args)
        lines += [f"    def test_{name}_{i}(self):", f"        from {module} import {name}",
                  f"        self.assertEqual({name}({shown}), {case['expected']!r})", ""]
    lines += ["", 'if __name__ == "__main__":', "    unittest.main()", ""]
    return "\n".join(lines)
