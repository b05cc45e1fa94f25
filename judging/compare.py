"""Compare what a candidate produced with what was expected, outside the sandbox.

Consumes decoded values (or stdout text) and a comparison mode; produces a yes or no, and
short readable renderings for evidence. Modes for values: "exact" (Python equality, except
that a bool never equals a number), "float" (floats within 1e-6 relative), "unordered" (the
top-level sequence as a multiset). Expected values read from JSON cannot be tuples, so
against them a tuple equals a list with the same items; against a reference value sequence
types must match as in Python. Modes for stdout: "text" (trailing whitespace of each line
and the end ignored) and "json" (parsed values equal). It runs nothing.
"""

from __future__ import annotations

import json
import math

from judging.harness import wire


def same_value(actual, expected, mode: str = "exact", *, from_json: bool = True) -> bool:
    if mode == "unordered" and _is_seq(actual) and _is_seq(expected):
        return len(actual) == len(expected) and sorted(map(_key, actual)) == sorted(map(_key, expected))
    return _eq(actual, expected, mode == "float", from_json)


def _eq(a, e, tolerant: bool, loose_seq: bool) -> bool:
    if isinstance(a, bool) or isinstance(e, bool):
        return type(a) is type(e) and a == e
    if isinstance(a, (int, float)) and isinstance(e, (int, float)):
        if tolerant and (isinstance(a, float) or isinstance(e, float)):
            return (math.isnan(a) and math.isnan(e)) or math.isclose(a, e, rel_tol=1e-6, abs_tol=1e-9)
        return a == e
    if _is_seq(a) and _is_seq(e):
        if not loose_seq and type(a) is not type(e):
            return False
        return len(a) == len(e) and all(_eq(x, y, tolerant, loose_seq) for x, y in zip(a, e))
    if isinstance(a, dict) and isinstance(e, dict):
        return a.keys() == e.keys() and all(_eq(a[k], e[k], tolerant, loose_seq) for k in a)
    try:
        return bool(a == e)
    except Exception:  # noqa: BLE001 - incomparable values are different
        return False


def _is_seq(x) -> bool:
    return isinstance(x, (list, tuple))


def _key(x) -> str:
    return wire.dumps(wire.encode(_lists(x)))


def _lists(x):
    if _is_seq(x):
        return [_lists(i) for i in x]
    return x


def same_stdout(actual: str, expected: str, mode: str = "text") -> bool:
    if mode == "json":
        try:
            return same_value(json.loads(actual), json.loads(expected), "float")
        except ValueError:
            return False
    return _norm(actual) == _norm(expected)


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def show(value, limit: int = 160) -> str:
    """A short repr for evidence and feedback."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
