"""Random tables for data-processing tasks: themes, rows, and their CSV / JSON text.

Consumes a seeded rng; produces a `Theme` (column names and value generators) and row lists
rendered as CSV, a JSON array or JSON lines. Values are drawn around given anchors, so
filters on a threshold meet rows exactly at it. It knows nothing about the operations.
"""

from __future__ import annotations

import csv
import io
import json
import random
from dataclasses import dataclass
from typing import Callable

NAMES = ("ana", "ben", "chen", "dana", "eli", "fatima", "gus", "hana", "ivan", "jo", "kai",
         "lena", "mo", "nora", "omar", "pia")


@dataclass(frozen=True)
class Theme:
    """One kind of table: what the rows are about and how values are drawn."""

    name: str
    "Noun used in prompts and file names ('orders')."
    key: str
    "Column identifying a row."
    categories: dict[str, tuple[str, ...]]
    "Text columns with few distinct values (good for filters and grouping)."
    numbers: dict[str, tuple[int, int]]
    "Integer columns and their ranges."

    @property
    def columns(self) -> list[str]:
        return [self.key, *self.categories, *self.numbers]


THEMES = (
    Theme("orders", "order_id", {"customer": NAMES[:6], "product": ("pen", "mug", "lamp", "desk")},
          {"qty": (1, 9), "price": (2, 60)}),
    Theme("employees", "name", {"dept": ("sales", "eng", "ops", "hr")},
          {"age": (21, 64), "salary": (30, 150)}),
    Theme("cities", "city", {"country": ("no", "se", "fi", "dk")},
          {"population": (5, 900), "area": (10, 400)}),
    Theme("students", "student", {"class": ("a", "b", "c"), "track": ("math", "art")},
          {"score": (0, 100), "age": (10, 18)}),
    Theme("inventory", "sku", {"warehouse": ("north", "south", "east"), "kind": ("bolt", "nut", "gear")},
          {"stock": (0, 50), "cost": (1, 30)}),
    Theme("trips", "trip", {"driver": NAMES[6:11], "zone": ("center", "airport", "harbor")},
          {"km": (1, 40), "minutes": (3, 90)}),
)


def _key_value(theme: Theme, rng: random.Random, i: int) -> str:
    if theme.key in ("name", "student"):
        return rng.choice(NAMES) + str(i)
    if theme.key == "city":
        return rng.choice(("oslo", "bergen", "lund", "turku", "aarhus", "malmo")) + str(i)
    return f"{theme.key[0]}{100 + i}"


def make_rows(theme: Theme, rng: random.Random, n: int,
              anchors: dict[str, list[int]] | None = None) -> list[dict]:
    """`n` rows; numbers hit `anchors` (column -> values) a third of the time."""
    anchors = anchors or {}
    rows = []
    for i in range(n):
        row: dict = {theme.key: _key_value(theme, rng, i)}
        for col, values in theme.categories.items():
            row[col] = rng.choice(values)
        for col, (lo, hi) in theme.numbers.items():
            if col in anchors and rng.random() < 0.35:
                row[col] = rng.choice(anchors[col]) + rng.choice((-1, 0, 0, 1))
            else:
                row[col] = rng.randint(lo, hi)
        rows.append(row)
    return rows


def as_csv(rows: list[dict], columns: list[str]) -> str:
    """CSV text with a header line, '\\n' line ends."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([row[c] for c in columns])
    return out.getvalue()


def as_json(rows: list[dict]) -> str:
    """A JSON array of row objects."""
    return json.dumps(rows)


def as_json_lines(rows: list[dict]) -> str:
    """One JSON object per line."""
    return "".join(json.dumps(r) + "\n" for r in rows)


RENDER: dict[str, Callable[[list[dict], list[str]], str]] = {
    "csv": as_csv,
    "json": lambda rows, cols: as_json(rows),
    "jsonl": lambda rows, cols: as_json_lines(rows),
}
"Input formats by name."

READ_CODE = {
    "csv": ("    rows = list(csv.DictReader(io.StringIO(text)))\n"
            "{convert}"),
    "json": "    rows = json.loads(text)\n",
    "jsonl": "    rows = [json.loads(line) for line in text.splitlines() if line.strip()]\n",
}
"Reference code reading `text` into `rows` (CSV numbers converted by `{convert}`)."

FORMAT_WORDS = {
    "csv": "CSV with a header line",
    "json": "a JSON array of objects",
    "jsonl": "JSON lines (one object per line)",
}
