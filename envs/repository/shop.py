"""The 'shop' project: a small package (money, discounts, cart, receipt) and its test suite,
with one defect injected.

Consumes a seeded `random.Random` and a rung; produces a `Project`: the reference files, the
defective files the model starts from, the defect's kind and the files the fix touches.
Rungs set how deep the fault lies and how many files it spans:

- 0: a wrong condition or a missing case in the module the failing test names;
- 1: the fault is one module below the failing call (cart total wrong because of money);
- 2: a broken refactor or a broken dependency between two modules (signature or name changed
  in one, callers in another not updated).

It computes nothing about tests (`envs.repository` does) and runs nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

PACKAGES = ("shop", "store", "market", "depot", "bazaar", "outlet")
TIER_NAMES = (("basic", "silver", "gold"), ("standard", "plus", "premium"),
              ("free", "pro", "team"), ("bronze", "silver", "platinum"))


@dataclass(frozen=True)
class Defect:
    """One defect planted in the shop package: its kind, rung, and the edits that make it."""

    kind: str
    "'wrong_condition', 'missing_case', 'broken_refactor' or 'broken_dependency'."
    level: int
    "Rung: 0 shallow, 1 one module deeper, 2 across two modules."
    refactor: tuple[tuple[str, str, str], ...]
    "(file, old text, new text): a change made before the defect, kept in the reference too."
    edits: tuple[tuple[str, str, str], ...]
    "(file, correct text, broken text): each replaced once in the reference."
    symptom: str
    "What a user saw, for the issue text."


@dataclass(frozen=True)
class Project:
    """One repository task's package: the reference files, the broken ones, and the defect."""

    package: str
    reference: dict[str, str]
    broken: dict[str, str]
    defect: Defect
    tiers: tuple[str, str, str]
    bulk_cents: int
    "The order size from which the bulk extra discount applies."

    @property
    def touched(self) -> list[str]:
        return sorted({f for f, _, _ in self.defect.edits})


def _files(pkg: str, tiers: tuple[str, str, str], rates: tuple[int, int], bulk: int, extra: int,
           cap: int) -> dict[str, str]:
    low, mid, high = tiers
    return {
        f"{pkg}/__init__.py": f'"""The {pkg} package: prices, discounts, carts and receipts."""\n',
        f"{pkg}/money.py": (
            '"""Money helpers. Amounts inside the package are integer cents."""\n\n\n'
            "def to_cents(amount):\n"
            '    """A price in currency units (a float) as integer cents."""\n'
            "    return int(round(amount * 100))\n\n\n"
            "def apply_rate(cents, rate_percent):\n"
            '    """`cents` reduced by `rate_percent` percent, rounded down."""\n'
            "    return cents * (100 - rate_percent) // 100\n\n\n"
            "def format_cents(cents):\n"
            '    """Cents as text with two decimals, e.g. 1205 -> \'12.05\'."""\n'
            "    sign = '-' if cents < 0 else ''\n"
            "    cents = abs(cents)\n"
            "    return f'{sign}{cents // 100}.{cents % 100:02d}'\n"),
        f"{pkg}/discounts.py": (
            '"""Discount rules: a rate per customer tier, plus an extra rate on bulk orders."""\n\n'
            f"TIER_RATES = {{{low!r}: 0, {mid!r}: {rates[0]}, {high!r}: {rates[1]}}}\n"
            f"BULK_CENTS = {bulk}\n"
            f"BULK_EXTRA = {extra}\n"
            f"MAX_RATE = {cap}\n\n\n"
            "def discount_rate(tier, total_cents):\n"
            '    """Percent off for a customer of `tier` whose order totals `total_cents`."""\n'
            "    rate = TIER_RATES.get(tier, 0)\n"
            "    if total_cents >= BULK_CENTS:\n"
            "        rate += BULK_EXTRA\n"
            "    return min(rate, MAX_RATE)\n"),
        f"{pkg}/cart.py": (
            '"""Carts: lists of items {"name", "price", "qty"} and their totals."""\n\n'
            f"from {pkg}.discounts import discount_rate\n"
            f"from {pkg}.money import apply_rate, to_cents\n\n\n"
            "def line_total(item):\n"
            '    """Cents for one line of the cart; lines with no quantity count nothing."""\n'
            "    if item['qty'] <= 0:\n"
            "        return 0\n"
            "    return to_cents(item['price']) * item['qty']\n\n\n"
            "def cart_total(items, tier):\n"
            '    """Cents to pay for `items` by a customer of `tier`, discounts applied."""\n'
            "    subtotal = sum(line_total(item) for item in items)\n"
            "    return apply_rate(subtotal, discount_rate(tier, subtotal))\n"),
        f"{pkg}/receipt.py": (
            '"""Receipts: one line of text per order."""\n\n'
            f"from {pkg}.cart import cart_total\n"
            f"from {pkg}.money import format_cents\n\n\n"
            "def receipt_line(items, tier):\n"
            '    """E.g. \'3 items, total 12.05\' (items counted by quantity)."""\n'
            "    count = sum(max(item['qty'], 0) for item in items)\n"
            "    return f'{count} items, total {format_cents(cart_total(items, tier))}'\n"),
    }


def _defects(pkg: str, tiers: tuple[str, str, str], rates: tuple[int, int], bulk: int) -> list[Defect]:
    high = tiers[2]
    m, d, c, r = (f"{pkg}/{n}.py" for n in ("money", "discounts", "cart", "receipt"))
    old_call = "return apply_rate(subtotal, discount_rate(tier, subtotal))"
    return [
        Defect("wrong_condition", 0, (), ((d, "if total_cents >= BULK_CENTS:", "if total_cents > BULK_CENTS:"),),
               f"an order of exactly {bulk / 100:.2f} gets no bulk discount"),
        Defect("wrong_condition", 0, (), ((d, "return min(rate, MAX_RATE)", "return max(rate, MAX_RATE)"),),
               "small orders get a large discount"),
        Defect("missing_case", 0, (), ((d, f", {high!r}: {rates[1]}}}", "}"),),
               f"{high} customers get no tier discount"),
        Defect("wrong_condition", 0, (), ((m, "sign = '-' if cents < 0 else ''", "sign = '-' if cents > 0 else ''"),),
               "receipts show totals with a minus sign"),
        Defect("missing_case", 1, (), ((c, "    if item['qty'] <= 0:\n        return 0\n", ""),),
               "returned lines (negative quantity) reduce the total"),
        Defect("wrong_condition", 1, (), ((m, "return int(round(amount * 100))", "return int(amount * 100)"),),
               "some totals are one cent short"),
        Defect("wrong_condition", 1, (), ((m, "return cents * (100 - rate_percent) // 100",
                                           "return cents * (100 - rate_percent) // 10"),),
               "discounted totals are ten times too large"),
        Defect("broken_refactor", 2,
               ((m, "def apply_rate(cents, rate_percent):", "def apply_rate(rate_percent, cents):"),
                (c, old_call, "return apply_rate(discount_rate(tier, subtotal), subtotal)")),
               ((c, "return apply_rate(discount_rate(tier, subtotal), subtotal)", old_call),),
               "since money.apply_rate takes the rate first, cart totals are wrong"),
        Defect("broken_dependency", 2,
               ((m, "def format_cents(cents):", "def format_amount(cents):"),
                (r, f"from {pkg}.money import format_cents", f"from {pkg}.money import format_amount"),
                (r, "total {format_cents(", "total {format_amount(")),
               ((r, f"from {pkg}.money import format_amount", f"from {pkg}.money import format_cents"),
                (r, "total {format_amount(", "total {format_cents(")),
               "since money.format_cents was renamed to format_amount, receipts fail to import"),
        Defect("broken_dependency", 2,
               ((d, "def discount_rate(tier, total_cents):", "def discount_rate(total_cents, tier):"),
                (c, old_call, "return apply_rate(subtotal, discount_rate(subtotal, tier))")),
               ((c, "return apply_rate(subtotal, discount_rate(subtotal, tier))", old_call),),
               "since discounts.discount_rate takes the total first, carts fail"),
    ]


def _replace(files: dict[str, str], edits, what: str) -> dict[str, str]:
    out = dict(files)
    for path, old, new in edits:
        if old not in out[path]:
            raise AssertionError(f"{what}: {old!r} not found in {path}")
        out[path] = out[path].replace(old, new, 1)
    return out


def make_project(rng: random.Random, level: int) -> Project:
    """One project at rung `level` (clamped to 0..2), every choice from `rng`."""
    pkg = rng.choice(PACKAGES)
    tiers = rng.choice(TIER_NAMES)
    mid = rng.randint(2, 8)
    high = mid + rng.randint(3, 10)
    bulk = rng.choice((50, 80, 100, 150, 200)) * 100
    extra = rng.randint(2, 6)
    cap = high + extra - rng.randint(1, 3)
    base = _files(pkg, tiers, (mid, high), bulk, extra, cap)
    choices = [d for d in _defects(pkg, tiers, (mid, high), bulk) if d.level == min(max(level, 0), 2)]
    defect = rng.choice(choices)
    reference = _replace(base, defect.refactor, f"refactor {defect.kind}")
    broken = _replace(reference, defect.edits, f"defect {defect.kind}")
    return Project(pkg, reference, broken, defect, tiers, bulk)
