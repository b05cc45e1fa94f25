"""Rung 0 of the data domain: short scripts over plain lines of standard input.

Consumes a seeded rng; produces (family, solve body, phrasings, input maker) for one
line-oriented task: sum numbers, count or filter lines, change case, reverse order. These are
the first steps a small model can take towards table processing.
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
