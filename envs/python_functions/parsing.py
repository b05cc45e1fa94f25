"""Parsing small text formats: key-value lists, times, numbers inside text, records.

Consumes a seeded rng and a rung (1-4); produces a `FunctionSpec`. Separators and field
names vary per draw, so the same family reads differently from task to task.
"""

from __future__ import annotations

import random

from envs.phrasing import pick
from envs.python_functions.spec import FunctionSpec

KEYS = ("a", "b", "x", "id", "n", "size", "qty", "age", "port", "level", "cpu", "mem")


def key_values(rng: random.Random, level: int) -> FunctionSpec:
    """'a=1;b=2' -> {'a': 1, 'b': 2}; higher rungs skip blanks and sum repeated keys."""
    pair, kv = rng.choice(";,&|"), rng.choice("=:")
    p = pick(rng, ("spec", "text", "query", "line", "settings"))
    body = (f"    out = {{}}\n    for part in {p}.split({pair!r}):\n"
            f"        part = part.strip()\n        if not part:\n            continue\n"
            f"        key, val = part.split({kv!r})\n"
            f"        out[key.strip()] = out.get(key.strip(), 0) + int(val)\n    return out\n")
    say = (f"parse `{p}`, a list of key{kv}value pairs separated by '{pair}' (values are "
           f"integers), and return a dict from key to value; ignore empty pairs and spaces "
           f"around them, and if a key appears more than once, add its values up")

    def make(r: random.Random) -> list:
        keys = r.sample(KEYS, r.randint(0, 4))
        if keys and r.random() < 0.4:
            keys.append(r.choice(keys))
        parts = [f"{k}{kv}{r.randint(-5, 99)}" for k in keys]
        if parts and r.random() < 0.3:
            parts.insert(r.randrange(len(parts)), " ")
        return [(pair + (" " if r.random() < 0.3 else "")).join(parts)]

    return FunctionSpec("parsing.key_values", pick(rng, ("parse_pairs", "parse_settings",
                        "read_kv", "to_dict")), [p], body, [say], make, edge_args=[[""]])


def clock_minutes(rng: random.Random, level: int) -> FunctionSpec:
    """'HH:MM' to minutes; at rung 3+, the minutes between two times across midnight."""
    if level < 3:
        p = pick(rng, ("clock", "time", "hhmm", "stamp"))
        body = f"    h, m = {p}.split(':')\n    return int(h) * 60 + int(m)\n"
        say = f"convert `{p}`, a time written 'HH:MM' (24-hour clock), to minutes since midnight"
        return FunctionSpec("parsing.clock", pick(rng, ("to_minutes", "minutes_of_day")), [p],
                            body, [say], lambda r: [f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}"],
                            edge_args=[["00:00"], ["23:59"]])
    a, b = pick(rng, (("start", "end"), ("t1", "t2"), ("begin", "finish")))
    body = (f"    def mins(t):\n        h, m = t.split(':')\n        return int(h) * 60 + int(m)\n"
            f"    return (mins({b}) - mins({a})) % 1440\n")
    say = (f"return how many minutes pass from time `{a}` to time `{b}` (both 'HH:MM', 24-hour), "
           f"going forward and wrapping past midnight if needed")
    return FunctionSpec("parsing.clock_span", pick(rng, ("minutes_between", "duration")), [a, b],
                        body, [say],
                        lambda r: [f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}" for _ in "ab"],
                        edge_args=[["10:00", "10:00"], ["23:30", "00:15"]])


def numbers_in_text(rng: random.Random, level: int) -> FunctionSpec:
    """Sum (or list) the integers written inside a string; negatives count at rung 3+."""
    p = pick(rng, ("text", "note", "report", "log_line"))
    signed = level >= 3
    pattern = r"-?\d+" if signed else r"\d+"
    want = pick(rng, ("sum", "list", "max"))
    code = {"sum": "sum(found)", "list": "found", "max": "max(found) if found else None"}[want]
    body = f"    found = [int(t) for t in re.findall({pattern!r}, {p})]\n    return {code}\n"
    kind = "integers (a '-' right before digits makes it negative)" if signed else \
        "whole numbers (runs of digits)"
    what = {"sum": "return their sum (0 if there are none)", "list": "return them as a list in order",
            "max": "return the largest, or None if there are none"}[want]
    say = f"find all {kind} written in `{p}` and {what}"

    def make(r: random.Random) -> list:
        words = ["got", "paid", "item", "x", "room", "on", "-", "and"]
        bits = [str(r.randint(-50, 500)) if r.random() < 0.4 else r.choice(words)
                for _ in range(r.randint(0, 7))]
        return [" ".join(bits)]

    return FunctionSpec(f"parsing.numbers_{want}", pick(rng, ("extract_numbers", "numbers_in")),
                        [p], body, [say], make, imports="import re", edge_args=[[""], ["a-5b"]])


def record_fields(rng: random.Random, level: int) -> FunctionSpec:
    """'name, age, city' records: pick a field by name from a header line and a data line."""
    h, d, f = "header", pick(rng, ("row", "record", "line")), pick(rng, ("field", "column", "name"))
    sep = rng.choice(",;|\t")
    body = (f"    names = [x.strip() for x in {h}.split({sep!r})]\n"
            f"    values = [x.strip() for x in {d}.split({sep!r})]\n"
            f"    if {f} not in names:\n        return None\n"
            f"    return values[names.index({f})]\n")
    shown = "a tab" if sep == "\t" else f"'{sep}'"
    say = (f"`{h}` and `{d}` are lines of fields separated by {shown}; return the value in "
           f"`{d}` under the column called `{f}`, with surrounding spaces removed, or None if "
           f"there is no such column")
    cols = ("name", "age", "city", "team", "score", "email", "zip")

    def make(r: random.Random) -> list:
        names = r.sample(cols, r.randint(1, 5))
        values = [r.choice(("ann", "bo", "42", "oslo", "red", "7", " kim ")) for _ in names]
        pad = " " if r.random() < 0.4 else ""
        pick_name = r.choice(names) if r.random() < 0.8 else r.choice(cols)
        return [(sep + pad).join(names), (sep + pad).join(values), pick_name]

    return FunctionSpec("parsing.record_field", pick(rng, ("get_field", "lookup_column")),
                        [h, d, f], body, [say], make,
                        edge_args=[[f"name{sep}age", f"bo{sep}7", "city"]])
