"""Robustness inputs: fixed ones, generated ones, or small mutations of the tests' own calls.

Consumes the `robustness` part of the job spec and the (encoded) arguments the candidate was
called with during the visible and hidden tests; produces exactly `len(inputs) + count`
inputs (None where none could be made), deterministic for a given seed. Mutations stay close
to real inputs (same types, same sizes give or take one, signs kept) so that the reference's
preconditions usually still hold; inputs the reference rejects are dropped by the harness.
It does NOT run anything.
"""

from __future__ import annotations

import random

import wire


def inputs(spec: dict, calls: list, *, script: bool) -> list:
    count = int(spec.get("count", 0))
    seed = int(spec.get("seed", 0))
    made: list = []
    if spec.get("generator"):
        ns: dict = {}
        exec(compile(spec["generator"], "<generator>", "exec"), ns)
        for i in range(count):
            try:
                value = ns["generate"](random.Random(seed + i))
                made.append(value if script else wire.encode(list(value)))
            except Exception:  # noqa: BLE001 - a generator failure leaves a hole, not a crash
                made.append(None)
    elif not script and calls:
        made = _mutations(calls, count, random.Random(seed))
    made += [None] * (count - len(made))
    return list(spec.get("inputs", [])) + made[:count]


def _mutations(calls: list, count: int, rng: random.Random) -> list:
    seen = {wire.dumps(c) for c in calls}
    made: list = []
    for _ in range(count * 6):
        if len(made) >= count:
            break
        args = wire.decode(rng.choice(calls))
        if not args:
            continue
        i = rng.randrange(len(args))
        args[i] = mutate(args[i], rng, 0)
        try:
            encoded = wire.encode(args)
        except wire.Unencodable:
            continue
        key = wire.dumps(encoded)
        if key not in seen:
            seen.add(key)
            made.append(encoded)
    return made


def mutate(v, rng: random.Random, depth: int):
    """A value like `v`, changed a little."""
    t = type(v)
    if t is bool:
        return not v
    if t is int:
        d = rng.choice((1, 2, 3, -1, -2))
        return v + d if (v + d >= 0) == (v >= 0) else v - d
    if t is float:
        return round(v * rng.choice((0.5, 1.5, 1.1, 0.9)) + rng.choice((0.0, 1.0)), 6)
    if t is str:
        return "".join(_mutate_seq(list(v), rng, depth, lambda: rng.choice(v or "ab")))
    if t in (list, tuple):
        out = _mutate_seq(list(v), rng, depth, None)
        return out if t is list else tuple(out)
    if t is dict and v and depth < 3:
        key = rng.choice(list(v))
        return {**v, key: mutate(v[key], rng, depth + 1)}
    return v


def _mutate_seq(items: list, rng: random.Random, depth: int, new_item) -> list:
    if not items:
        return [new_item()] if new_item else items
    i = rng.randrange(len(items))
    op = rng.choice(("change", "drop", "repeat", "swap"))
    if op == "change" and depth < 3:
        items[i] = new_item() if new_item else mutate(items[i], rng, depth + 1)
    elif op == "drop":
        del items[i]
    elif op == "repeat":
        items.insert(i, items[i])
    else:
        j = rng.randrange(len(items))
        items[i], items[j] = items[j], items[i]
    return items
