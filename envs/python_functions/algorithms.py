"""Small algorithms on lists and strings: encodings, runs, brackets, merging, search.

Consumes a seeded rng and a rung (2-4); produces a `FunctionSpec`. Each entry is a
reference body, a phrasing and an input generator; names and parameters vary per draw.
"""

from __future__ import annotations

import random

from envs.phrasing import pick
from envs.python_functions.spec import FunctionSpec


def _int_list(lo: int = -5, hi: int = 9, n: int = 9):
    return lambda r: [[r.randint(lo, hi) for _ in range(r.randint(0, n))]]


def _letters(alphabet: str = "aabbc", n: int = 10):
    return lambda r: ["".join(r.choice(alphabet) for _ in range(r.randint(0, n)))]


def _brackets(r: random.Random) -> list:
    out, depth = [], []
    for _ in range(r.randint(0, 10)):
        if depth and r.random() < 0.45:
            out.append({"(": ")", "[": "]", "{": "}"}[depth.pop()])
        else:
            c = r.choice("([{")
            depth.append(c)
            out.append(c)
    if r.random() < 0.5:  # break it sometimes
        i = r.randrange(len(out) + 1)
        out.insert(i, r.choice(")]}(["))
    return ["".join(out)]


# (rung, family, body, phrasing, argument generator, edge cases); `{a}` is the argument.
_TABLE = (
    (2, "run_length", "    out = ''\n    i = 0\n    while i < len({a}):\n        j = i\n"
     "        while j < len({a}) and {a}[j] == {a}[i]:\n            j += 1\n"
     "        out += {a}[i] + str(j - i)\n        i = j\n    return out\n",
     "run-length encode `{a}`: write each run of equal characters as the character followed "
     "by the run length ('aaab' becomes 'a3b1')", _letters(), [[""], ["z"]]),
    (2, "running_total", "    out = []\n    total = 0\n    for x in {a}:\n        total += x\n"
     "        out.append(total)\n    return out\n",
     "return the running totals of `{a}` (element i is the sum of the first i+1 numbers)",
     _int_list(), [[[]]]),
    (2, "longest_run", "    if not {a}:\n        return 0\n    best = run = 1\n"
     "    for i in range(1, len({a})):\n        run = run + 1 if {a}[i] == {a}[i - 1] else 1\n"
     "        best = max(best, run)\n    return best\n",
     "return the length of the longest stretch of equal adjacent elements in `{a}` (0 if empty)",
     _int_list(0, 2, 10), [[[]], [[4]]]),
    (2, "caesar", "    out = ''\n    for ch in {a}:\n        if ch.isalpha():\n"
     "            out += chr((ord(ch) - 97 + {k}) % 26 + 97)\n        else:\n            out += ch\n"
     "    return out\n",
     "shift every lowercase letter in `{a}` forward by {k} places in the alphabet, wrapping "
     "from 'z' to 'a'; leave other characters unchanged", _letters("abxyz .", 12), [[""]]),
    (3, "balanced", "    pairs = {{')': '(', ']': '[', '}}': '{{'}}\n    stack = []\n"
     "    for ch in {a}:\n        if ch in '([{{':\n            stack.append(ch)\n"
     "        elif ch in pairs:\n            if not stack or stack.pop() != pairs[ch]:\n"
     "                return False\n    return not stack\n",
     "return True if the brackets (), [] and {{}} in `{a}` are balanced and properly nested, "
     "else False", _brackets, [[""], ["(]"]]),
    (3, "second_largest", "    distinct = sorted(set({a}))\n"
     "    return distinct[-2] if len(distinct) >= 2 else None\n",
     "return the second largest distinct value in `{a}`, or None if there is none",
     _int_list(0, 6), [[[]], [[3, 3]]]),
    (3, "chunk", "    return [{a}[i:i + {k}] for i in range(0, len({a}), {k})]\n",
     "split `{a}` into consecutive chunks of {k} elements (the last may be shorter)",
     _int_list(), [[[]]]),
    (3, "rotate", "    if not {a}:\n        return []\n    s = {k} % len({a})\n"
     "    return {a}[s:] + {a}[:s]\n",
     "rotate `{a}` left by {k} positions (the first {k} elements move to the end, wrapping "
     "around for short lists)", _int_list(), [[[]], [[1]]]),
    (4, "most_common", "    counts = {{x: {a}.count(x) for x in {a}}}\n"
     "    if not counts:\n        return None\n    best = max(counts.values())\n"
     "    return min(x for x in counts if counts[x] == best)\n",
     "return the value that occurs most often in `{a}`; on a tie return the smallest such "
     "value; return None for an empty list", _int_list(0, 5, 10), [[[]]]),
    (4, "merge_sorted", "    i = j = 0\n    out = []\n    while i < len({a}) and j < len({b}):\n"
     "        if {a}[i] <= {b}[j]:\n            out.append({a}[i])\n            i += 1\n"
     "        else:\n            out.append({b}[j])\n            j += 1\n"
     "    return out + {a}[i:] + {b}[j:]\n",
     "merge the sorted lists `{a}` and `{b}` into one sorted list without calling sort",
     lambda r: [sorted(r.randint(0, 20) for _ in range(r.randint(0, 6))) for _ in "ab"],
     [[[], []], [[1], []]]),
    (4, "pascal_row", "    row = [1]\n    for _ in range({a}):\n"
     "        row = [1] + [row[i] + row[i + 1] for i in range(len(row) - 1)] + [1]\n    return row\n",
     "return row `{a}` of Pascal's triangle as a list (row 0 is [1], row 2 is [1, 2, 1])",
     lambda r: [r.randint(0, 12)], [[0], [1]]),
    (4, "lcp", "    if not {a}:\n        return ''\n    prefix = {a}[0]\n    for w in {a}[1:]:\n"
     "        while not w.startswith(prefix):\n            prefix = prefix[:-1]\n    return prefix\n",
     "return the longest common prefix of the strings in `{a}` ('' for an empty list)",
     lambda r: [[r.choice(("flow", "flower", "flight", "fl", "flows", "dog", "f")) for _ in
                 range(r.randint(1, 4))]], [[[]], [["solo"]]]),
)

_NAMES = {"run_length": ("rle", "encode_runs", "compress"), "running_total": ("prefix_sums",
          "cumulative"), "longest_run": ("longest_streak", "max_run"), "caesar": ("shift_letters",
          "caesar"), "balanced": ("is_balanced", "brackets_ok"), "second_largest": (
          "second_max", "runner_up"), "chunk": ("chunks", "split_every"), "rotate": (
          "rotate_left", "shift_list"), "most_common": ("mode", "most_frequent"),
          "merge_sorted": ("merge", "merge_lists"), "pascal_row": ("pascal", "triangle_row"),
          "lcp": ("common_prefix", "shared_start")}


def small_algorithm(rng: random.Random, level: int) -> FunctionSpec:
    """One entry of the table at this rung (or the nearest lower one)."""
    rung = min(max(level, 2), 4)
    family, body, say, make, edges = pick(rng, [row[1:] for row in _TABLE if row[0] == rung])
    a = pick(rng, ("s", "text", "word") if family in ("run_length", "caesar", "balanced")
             else ("xs", "items", "values", "seq", "data") if family != "pascal_row" else ("n",))
    b = "other" if family == "merge_sorted" else ""
    k = rng.randint(1, 5)
    params = [a, b] if b else [a]
    fill = dict(a=a, b=b, k=k)
    return FunctionSpec(f"algorithms.{family}", pick(rng, _NAMES[family]), params,
                        body.format(**fill), [say.format(**fill)], make, edge_args=list(edges))
