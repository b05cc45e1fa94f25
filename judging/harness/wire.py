"""Safe value encoding between the harness, its workers and the judge. Never pickle.

Consumes plain Python values; produces JSON-able trees, and back. Only exact built-in types
cross (None, bool, int, float, str, bytes, complex, list, tuple, dict, set, frozenset), so a
candidate cannot smuggle an object whose `__eq__` always answers True: a subclass or a
user-defined class is refused with `Unencodable`. Decoding builds only those types, so a
hostile payload can at worst be refused. Size and depth are bounded both ways.

Encoding: JSON null/bool/str and in-range ints and finite floats stand for themselves, a
JSON list is a list; everything else is an object {"$": tag, "v": payload}.
"""

from __future__ import annotations

import hashlib
import json
import math

MAX_NODES = 200_000
MAX_DEPTH = 64
_INT_RANGE = 2**63


class Unencodable(ValueError):
    """A value outside the safe types (or too large, or too deep)."""


def encode(value):
    """The JSON-able tree of `value`, or Unencodable naming the offending type."""
    return _enc(value, 0, [MAX_NODES])


def _enc(v, depth, budget):
    budget[0] -= 1
    if budget[0] < 0:
        raise Unencodable(f"value has more than {MAX_NODES} parts")
    if depth > MAX_DEPTH:
        raise Unencodable(f"value is nested more than {MAX_DEPTH} deep")
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -_INT_RANGE <= v < _INT_RANGE else {"$": "int", "v": hex(v)}
    if t is float:
        return v if math.isfinite(v) else {"$": "float", "v": repr(v)}
    d = depth + 1
    if t is list:
        return [_enc(x, d, budget) for x in v]
    if t is tuple:
        return {"$": "tuple", "v": [_enc(x, d, budget) for x in v]}
    if t is dict:
        return {"$": "dict", "v": [[_enc(k, d, budget), _enc(x, d, budget)] for k, x in v.items()]}
    if t is set or t is frozenset:
        items = sorted((_enc(x, d, budget) for x in v), key=dumps)
        return {"$": t.__name__, "v": items}
    if t is bytes:
        return {"$": "bytes", "v": v.hex()}
    if t is complex:
        return {"$": "complex", "v": [_enc(v.real, d, budget), _enc(v.imag, d, budget)]}
    raise Unencodable(f"a value of type {t.__name__}" + (" that overrides __eq__" if overrides_eq(v) else ""))


def overrides_eq(value) -> bool:
    """True when `value`'s class (or a base other than the built-ins) defines __eq__."""
    for klass in type(value).__mro__:
        if klass.__module__ == "builtins":
            return False
        if "__eq__" in vars(klass) or "__ne__" in vars(klass):
            return True
    return False


def decode(tree):
    """The value `tree` encodes; ValueError for anything `encode` would not have written."""
    try:
        return _dec(tree, 0, [MAX_NODES])
    except TypeError as exc:  # an unhashable key or set member
        raise ValueError(str(exc)) from None


def _dec(x, depth, budget):
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise ValueError("encoded value too large or too deep")
    t = type(x)
    if x is None or t in (bool, str, int, float):
        return x
    d = depth + 1
    if t is list:
        return [_dec(i, d, budget) for i in x]
    if t is not dict or set(x) != {"$", "v"}:
        raise ValueError(f"not an encoded value: {str(x)[:80]}")
    tag, v = x["$"], x["v"]
    if tag == "int" and type(v) is str:
        return int(v, 16)
    if tag == "float" and v in ("nan", "inf", "-inf"):
        return float(v)
    if tag == "bytes" and type(v) is str:
        return bytes.fromhex(v)
    if type(v) is not list:
        raise ValueError(f"bad payload for tag {tag!r}")
    if tag == "tuple":
        return tuple(_dec(i, d, budget) for i in v)
    if tag == "set":
        return {_dec(i, d, budget) for i in v}
    if tag == "frozenset":
        return frozenset(_dec(i, d, budget) for i in v)
    if tag == "dict" and all(type(p) is list and len(p) == 2 for p in v):
        return {_dec(k, d, budget): _dec(i, d, budget) for k, i in v}
    if tag == "complex" and len(v) == 2:
        return complex(_dec(v[0], d, budget), _dec(v[1], d, budget))
    raise ValueError(f"unknown tag {tag!r}")


def dumps(tree) -> str:
    """Canonical compact JSON of an encoded tree (equal trees give equal text)."""
    return json.dumps(tree, separators=(",", ":"), sort_keys=True, allow_nan=False)


def digest(text: str) -> str:
    """Short hex SHA-256 of `text`."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]
