"""Table tasks: read rows, apply filter / sort / derive / head steps, write a result.

Consumes a seeded rng and a rung (1-4); produces the parts of a script task: the body of
`solve(text)`, its ablations (one step dropped each), phrasings of what to do, and the
input maker. Difficulty: the number of steps, the output (a number, a column, CSV, JSON,
grouped totals) and the input format (CSV, JSON array, JSON lines, a named file).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from envs.data_scripts import tables
from envs.phrasing import pick


@dataclass
class TableTask:
    """One generated data-script task: its steps, output, theme and format."""

    family: str
    steps: list[tuple[str, str, str]]
    "(kind, code line(s) on `rows`, phrase)."
    output: tuple[str, str, str]
    "(kind, code returning the output string, phrase)."
    theme: tables.Theme
    fmt: str
    anchors: dict[str, list[int]] = field(default_factory=dict)
    ordered: bool = False
    "Whether row order shows in the output (sorting matters)."
    max_rows: int = 8
    "Most rows of a random input."


def _filter(rng: random.Random, theme: tables.Theme, anchors: dict) -> tuple[str, str, str]:
    if rng.random() < 0.6:
        col = rng.choice(list(theme.numbers))
        lo, hi = theme.numbers[col]
        k = rng.randint(lo + (hi - lo) // 4, hi - (hi - lo) // 4)
        anchors.setdefault(col, []).append(k)
        op, words = rng.choice((
            (">", f"is greater than {k}"), ("<", f"is less than {k}"),
            (">=", f"is at least {k}"), ("<=", f"is at most {k}")))
        return "filter", f"    rows = [r for r in rows if r[{col!r}] {op} {k}]\n", \
            f"keep only the rows whose `{col}` {words}"
    col = rng.choice(list(theme.categories))
    value = rng.choice(theme.categories[col])
    return "filter", f"    rows = [r for r in rows if r[{col!r}] == {value!r}]\n", \
        f"keep only the rows whose `{col}` is `{value}`"


def _sort(rng: random.Random, theme: tables.Theme) -> tuple[str, str, str]:
    col = rng.choice(list(theme.numbers))
    desc = rng.random() < 0.5
    code = f"    rows = sorted(rows, key=lambda r: r[{col!r}]{', reverse=True' if desc else ''})\n"
    way = "from largest to smallest" if desc else "from smallest to largest"
    return "sort", code, f"sort the rows by `{col}` {way} (rows with equal `{col}` keep their " \
                         f"input order)"


def _derive(rng: random.Random, theme: tables.Theme) -> tuple[str, str, str]:
    a, b = rng.sample(list(theme.numbers), 2)
    op, word = rng.choice((("*", "times"), ("+", "plus"), ("-", "minus")))
    new = rng.choice(("total", "combined", "score2", "value", "result"))
    code = f"    for r in rows:\n        r[{new!r}] = r[{a!r}] {op} r[{b!r}]\n"
    return "derive:" + new, code, f"add a column `{new}` equal to `{a}` {word} `{b}`"


def _output(rng: random.Random, level: int, theme: tables.Theme, cols: list[str],
            derived: str = "") -> tuple[tuple[str, str, str], bool]:
    """The output step and whether it shows row order; a derived column is always used."""
    num = derived or rng.choice(list(theme.numbers))
    simple = [
        (("count", "    return str(len(rows))\n", "print the number of rows"), False),
        (("sum", f"    return str(sum(r[{num!r}] for r in rows))\n",
          f"print the total of the `{num}` column (0 if there are no rows)"), False),
        (("values", f"    return '\\n'.join(str(r[{theme.key!r}]) for r in rows)\n",
          f"print the `{theme.key}` of each row, one per line"), True),
    ]
    if level <= 1:
        return pick(rng, simple)
    others = [c for c in cols if c not in (theme.key, derived)]
    shown = [theme.key] + ([derived] if derived else []) + rng.sample(others, 2 - bool(derived))
    richer = [
        (("csv", "    out = io.StringIO()\n    w = csv.writer(out, lineterminator='\\n')\n"
                 f"    w.writerow({shown!r})\n    for r in rows:\n"
                 f"        w.writerow([r[c] for c in {shown!r}])\n    return out.getvalue()\n",
          f"print the result as CSV with the header line `{','.join(shown)}` and those columns "
          f"only"), True),
        (("json", f"    return json.dumps([{{c: r[c] for c in {shown!r}}} for r in rows])\n",
          f"print the rows as a JSON array of objects with only the keys "
          f"{', '.join(f'`{c}`' for c in shown)}"), True),
    ]
    if level >= 3:
        group = rng.choice(list(theme.categories))
        richer.append((("group", f"    totals = {{}}\n    for r in rows:\n"
                        f"        totals[r[{group!r}]] = totals.get(r[{group!r}], 0) + r[{num!r}]\n"
                        f"    return json.dumps(totals)\n",
                        f"print a JSON object mapping each `{group}` value to the sum of `{num}` "
                        f"over its rows (values with no rows left are left out)"), False))
    return pick(rng, richer if level >= 3 else richer + simple[1:])


def table_task(rng: random.Random, level: int) -> TableTask:
    """Steps and output for rung `level` (1-4)."""
    theme = pick(rng, tables.THEMES)
    fmt = "csv" if level <= 2 else pick(rng, ("csv", "json", "jsonl"))
    anchors: dict[str, list[int]] = {}
    steps: list[tuple[str, str, str]] = []
    cols = theme.columns
    derived = ""
    n_steps = {1: rng.choice((0, 1)), 2: rng.choice((1, 2)), 3: 2, 4: 3}[min(level, 4)]
    if level >= 4 or (level == 3 and rng.random() < 0.5):
        steps.append(_derive(rng, theme))
        derived = steps[-1][0].split(":")[1]
        cols = cols + [derived]
    while len(steps) < n_steps:
        steps.append(_filter(rng, theme, anchors))
    output, ordered = _output(rng, level, theme, cols, derived)
    if level >= 2 and rng.random() < 0.5 and output[0] in ("csv", "json", "values"):
        steps.append(_sort(rng, theme))
        ordered = True
        if level >= 4:
            k = rng.randint(1, 3)
            steps.append(("head", f"    rows = rows[:{k}]\n", f"keep only the first {k} rows"))
    return TableTask(f"tables.{output[0]}{len(steps)}", steps, output, theme, fmt, anchors,
                     ordered, max_rows=6 + 2 * level)


def convert_code(task: TableTask) -> str:
    """Lines turning the CSV text of the number columns the task computes with into ints.

    Columns only printed as text are left alone: converting them would be dead code.
    """
    code = "".join(c for _, c, _ in task.steps)
    if task.output[0] in ("json", "sum", "group"):
        code += task.output[1]
    used = [c for c in task.theme.numbers if f"r[{c!r}]" in code]
    if not used:
        return ""
    return "    for r in rows:\n" + "".join(f"        r[{c!r}] = int(r[{c!r}])\n" for c in used)


def make_input(task: TableTask) -> Callable[[random.Random], str]:
    """Random input text in the task's format."""
    def make(r: random.Random) -> str:
        rows = tables.make_rows(task.theme, r, r.randint(0, task.max_rows), task.anchors)
        return tables.RENDER[task.fmt](rows, task.theme.columns)
    return make
