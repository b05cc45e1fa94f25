"""Robustness inputs: fixed ones, near ones of each visible test, generated or mutated ones.

Consumes the `robustness` part of the job spec and the (origin, input) pairs the candidate
ran on: a call's encoded arguments or a script case, with the test id it came from
("visible/0", "hidden/3"); produces exactly `len(inputs) + count` (input, origin, base)
triples (input None where none could be made), deterministic for a given seed. Each visible
test gets "near" inputs first, small changes of its own input tagged with its id (keeping its
answer or not), so the judge can tell rote from computing; the rest of `count` is generated
or mutated from any call. Mutations stay close to real inputs (same types, sizes give or
take one, signs kept) so the reference's preconditions usually hold; inputs the reference
rejects are dropped by the harness. It does NOT run anything.
"""

from __future__ import annotations

import random
import re

import wire

NEAR_PER_TEST = 2
"Near inputs made for each visible test (one keeping its answer, one not), as `count` allows."
NEAR_SHARE = 0.6
"Share of `count` near inputs take at least when generated or mutated inputs could fill the rest."
TRIES = 3
"Changes of a visible input tried for one near input, when the reference's answers are known."
NO_ANSWER = object()
"No answer known (a reference's answer may itself be None)."
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")


def inputs(spec: dict, calls: list, *, script: bool, answer=None) -> list:
    """`answer(args)`, where given, is the reference's encoded value for a call's arguments
    (None when it has none): each visible test's near inputs then alternate between one whose
    answer is the visible input's own and one whose answer differs, so no fallback that
    ignores its input can be right on both; the third of each triple is the reference's
    (encoded) answer on the visible input a near input was made from, else NO_ANSWER."""
    count = int(spec.get("count", 0))
    seed = int(spec.get("seed", 0))
    rng = random.Random(seed)
    generator = spec.get("generator")
    other = bool(generator) or (not script and bool(calls))
    tests = len({o for o, _ in calls if str(o).startswith("visible/")})
    budget = count if not other else min(count, max(round(count * NEAR_SHARE), NEAR_PER_TEST * tests))
    near = _near(calls, budget, rng, script, None if script else answer)
    made: list = []
    rest = count - len(near)
    if generator:
        ns: dict = {}
        exec(compile(generator, "<generator>", "exec"), ns)
        for i in range(rest):
            try:
                value = ns["generate"](random.Random(seed + i))
                made.append(value if script else wire.encode(list(value)))
            except Exception:  # noqa: BLE001 - a generator failure leaves a hole, not a crash
                made.append(None)
    elif not script and calls:
        made = _mutations([c for _, c in calls], rest, rng, {wire.dumps(x[0]) for x in near})
    made = [(m, None, NO_ANSWER) for m in made[:rest]]
    made += [(None, None, NO_ANSWER)] * (rest - len(made))
    return [(x, None, NO_ANSWER) for x in spec.get("inputs", [])] + [(x, o, b) for x, o, _, b in near] + made


def _near(calls: list, budget: int, rng: random.Random, script: bool, answer) -> list:
    """Up to `budget` (input, origin, key, base) quadruples: rounds over the visible tests (a
    sample of them when the budget cannot give each NEAR_PER_TEST), one changed input of each
    test per round, none equal to an input already seen; with `answer`, of up to TRIES changes
    the first that keeps the visible input's answer in even rounds, that changes it in odd ones
    (else the first the reference answers), `base` being the visible input's answer
    (NO_ANSWER without `answer`)."""
    by_test: dict[str, list] = {}
    for origin, value in calls:
        if str(origin).startswith("visible/"):
            by_test.setdefault(origin, []).append(value)
    if not by_test or budget <= 0:
        return []
    tests = list(by_test)
    most = max(1, budget // NEAR_PER_TEST)
    if len(tests) > most:  # the budget cannot cover every test: a sample, judged by the pooled rate
        tests = sorted(rng.sample(tests, most), key=tests.index)
    seen = {_key(v, script) for o, v in calls if str(o).startswith("visible/")}  # a hidden input is near too
    answers: dict = {}

    def answered(value):
        key = wire.dumps(value)
        if key not in answers:
            got = answer(value)
            answers[key] = None if got is None else (wire.dumps(got), got[0])
        return answers[key]

    out: list = []
    for r in range(-(-budget // len(tests))):
        want = r % 2 == 0
        for origin in tests:
            if len(out) >= budget:
                return out
            kept: list = []
            for _ in range(TRIES * 3):
                base = rng.choice(by_test[origin])
                value = _near_case(base, rng) if script else _near_call(base, rng, transform=True)
                key = _key(value, script) if value is not None else None
                if key is None or key in seen:
                    continue
                seen.add(key)
                if answer is None:
                    kept = [(value, NO_ANSWER)]
                    break
                if answered(value) is None or answered(base) is None:
                    continue  # outside the reference's preconditions: worth nothing
                at_base = answered(base)[1]
                if (answered(value)[0] == answered(base)[0]) == want:
                    kept = [(value, at_base)]
                    break
                kept.append((value, at_base))
                if len(kept) >= TRIES:
                    break
            if kept:
                value, at_base = kept[0]
                out.append((value, origin, _key(value, script), at_base))
    return out


def _key(value, script: bool) -> str | None:
    try:
        return repr(sorted(value.items())) if script else wire.dumps(value)
    except Exception:  # noqa: BLE001 - an odd input is simply not deduplicated
        return None


def _near_call(encoded: list, rng: random.Random, transform: bool = False):
    """The call with one argument changed a little or, with `transform`, sometimes the whole
    input transformed: every number scaled, or one argument's items or words shuffled or
    repeated (answers that are invariant under those are kept, where small changes rarely keep them)."""
    args = wire.decode(encoded)
    if not args:
        return None
    if transform and rng.random() < 1 / 3:
        args = _transform(args, rng)
    else:
        i = rng.randrange(len(args))
        args[i] = mutate(args[i], rng, 0)
    try:
        return wire.encode(args)
    except wire.Unencodable:
        return None


def _transform(args: list, rng: random.Random) -> list:
    ops = ["scale"] + [i for i, a in enumerate(args) if type(a) in (list, tuple, str) and len(a) > 0]
    op = rng.choice(ops)
    if op == "scale":
        k = rng.choice((2, 3))
        return [_scaled(a, k) for a in args]
    value = args[op]
    if rng.random() < 0.5:  # the sequence twice over
        args[op] = value + (" " if type(value) is str and " " in value else value[:0]) + value
        return args
    if type(value) is str:
        words = value.split(" ")
        items = words if len(words) > 1 else list(value)
        rng.shuffle(items)
        args[op] = (" " if len(words) > 1 else "").join(items)
    else:
        items = list(value)
        rng.shuffle(items)
        args[op] = items if type(value) is list else tuple(items)
    return args


def _scaled(v, k: int):
    if type(v) in (int, float):
        return v * k
    if type(v) in (list, tuple):
        return type(v)(_scaled(x, k) for x in v)
    return v


def _near_case(case: dict, rng: random.Random) -> dict | None:
    """A script case with its stdin (or one of its files) changed a little."""
    files = dict(case.get("files") or {})
    if str(case.get("stdin", "")).strip() or not files:
        new = near_text(str(case.get("stdin", "")), rng)
        return None if new is None else {"stdin": new, "files": files}
    name = rng.choice(sorted(files))
    new = near_text(str(files[name]), rng)
    return None if new is None else {"stdin": case.get("stdin", ""), "files": {**files, name: new}}


def near_text(text: str, rng: random.Random) -> str | None:
    """`text` with one number changed, or, for text of three lines or more, one line after the
    first (a header, perhaps) repeated, dropped or swapped with another."""
    numbers = list(_NUMBER.finditer(text))
    lines = text.split("\n")
    body = [i for i, line in enumerate(lines) if i and line.strip()]
    ops = (["number"] * 2 if numbers else []) + (["line"] if len(body) >= 2 else [])
    if not ops:
        return None
    if rng.choice(ops) == "number":
        m = rng.choice(numbers)
        token = m.group(0)
        value = float(token) if "." in token else int(token)
        new = mutate(value, rng, 0)
        if isinstance(new, float):
            new = round(new, len(token.split(".")[1]))
        return text[:m.start()] + str(new) + text[m.end():]
    i, j = rng.choice(body), rng.choice(body)
    op = rng.choice(("repeat", "drop", "swap"))
    if op == "repeat":
        lines.insert(i, lines[i])
    elif op == "drop":
        del lines[i]
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _mutations(calls: list, count: int, rng: random.Random, taken: set) -> list:
    seen = {wire.dumps(c) for c in calls} | taken
    made: list = []
    for _ in range(count * 6):
        if len(made) >= count:
            break
        encoded = _near_call(rng.choice(calls), rng)
        if encoded is None:
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
