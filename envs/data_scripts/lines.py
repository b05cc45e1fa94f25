"""The first rungs of the data domain: scripts over one line, then over plain lines, of stdin.

Consumes a seeded rng; produces (family, solve body, phrasings, input maker) for one task.
Rung 0 reads a single line (a number, two numbers, a word) and prints one result, which a
small model can write with `input()`; rung 1 reads many lines: sum numbers, count or filter
lines, change case, reverse order. These are the steps towards table processing.
"""

from __future__ import annotations

import random
from typing import Callable

from envs.data_scripts.tables import NAMES
from envs.phrasing import pick

WORDS = ("alpha", "beta", "gamma", "error", "ok", "warn", "note", "done", "todo", "fix")


def _numbers(r: random.Random) -> str:
    return "".join(f"{r.randint(-20, 99)}\n" for _ in range(r.randint(0, 7)))


def _words_with(word: str):
    """Lines of words where `word` is common, so a filter on it keeps several lines."""
    def make(r: random.Random) -> str:
        lines = [" ".join(word if r.random() < 0.3 else r.choice(WORDS + NAMES)
                          for _ in range(r.randint(1, 3)))
                 for _ in range(r.randint(0, 6))]
        return "".join(line + "\n" for line in lines)
    return make


def line_task(rng: random.Random) -> tuple[str, str, list[str], Callable[[random.Random], str]]:
    """(family, body of solve(text), phrasings, stdin maker)."""
    word = rng.choice(WORDS[:5])
    _words = _words_with(word)
    table = (
        ("lines.sum", "    return str(sum(int(x) for x in text.split()))\n",
         ["read integers, one per line, and print their sum",
          "print the total of the whole numbers given one per line"], _numbers),
        ("lines.count", "    return str(len(text.splitlines()))\n",
         ["print how many lines the input has", "count the input lines and print the count"],
         _words),
        ("lines.upper", "    return text.upper()\n",
         ["print the input with every letter in uppercase",
          "echo the input back, converted to uppercase"], _words),
        ("lines.reverse", "    return '\\n'.join(text.splitlines()[::-1])\n",
         ["print the input lines in reverse order (last line first)",
          "output the lines from bottom to top"], _words),
        ("lines.grep", f"    return '\\n'.join(line for line in text.splitlines() if {word!r} in line)\n",
         [f"print only the lines that contain the text '{word}', in order",
          f"keep the lines mentioning '{word}' and print them"], _words),
        ("lines.max", "    nums = [int(x) for x in text.split()]\n"
                      "    return str(max(nums)) if nums else 'none'\n",
         ["read integers, one per line, and print the largest (print none if there are none)"],
         _numbers),
    )
    return pick(rng, table)


def _one_number(lo: int, hi: int):
    return lambda r: f"{r.randint(lo, hi)}\n"


def single_line_task(rng: random.Random) -> tuple[str, str, list[str], Callable[[random.Random], str]]:
    """(family, body of solve(text), phrasings, stdin maker) reading one line."""
    k = rng.randint(2, 9)
    table = (
        ("line.times", f"    return str(int(text) * {k})\n",
         [f"read one integer and print it multiplied by {k}",
          f"read a whole number from the input line and print {k} times that number"],
         _one_number(-50, 200)),
        ("line.plus", f"    return str(int(text) + {k})\n",
         [f"read one integer and print that number plus {k}",
          f"read a number and print the number that is {k} larger"], _one_number(-50, 200)),
        ("line.sum2", "    a, b = text.split()\n    return str(int(a) + int(b))\n",
         ["read two integers written on one line, separated by a space, and print their sum"],
         lambda r: f"{r.randint(-40, 99)} {r.randint(-40, 99)}\n"),
        ("line.upper", "    return text.strip().upper()\n",
         ["read one word and print it in uppercase", "read a word and print it in capitals"],
         lambda r: r.choice(WORDS + NAMES) + "\n"),
        ("line.length", "    return str(len(text.strip()))\n",
         ["read one word and print how many letters it has"],
         lambda r: r.choice(WORDS + NAMES) + "\n"),
        ("line.square", "    n = int(text)\n    return str(n * n)\n",
         ["read one integer and print its square"], _one_number(-30, 30)),
    )
    return pick(rng, table)
