"""A function-synthesis task before it becomes a Draft: the reference and how to probe it.

Consumes a `FunctionSpec` written by a family (reference body, phrasings, an argument
generator) and a seeded rng; produces a `Draft` whose verifier is `python_io`, with expected
values computed by running the trusted reference in this process. It rejects specs whose
steps do nothing on the generated inputs (`Redundant`), so the mutation gate is not fed
tasks with dead code. It does not run attempts.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from typing import Callable

import msgspec

from bus.messages import Verifier
from envs import phrasing
from envs.environment import Draft

VISIBLE = 3
HIDDEN = 16


class Redundant(Exception):
    """A spec whose variant without some step behaves the same: try another draw."""


@dataclass
class FunctionSpec:
    """What a family produces: a reference function and how to describe and probe it."""

    family: str
    name: str
    params: list[str]
    body: str
    "Reference body, each line indented four spaces, using `params`."
    says: list[str]
    "Alternative imperative phrasings of what it does ('return the sum of `xs`')."
    make_args: Callable[[random.Random], list]
    "One random argument list."
    edge_args: list[list] = field(default_factory=list)
    "Edge cases (empty, zero, boundaries) checked as the robustness layer."
    compare: str = "exact"
    imports: str = ""
    ablations: list[str] = field(default_factory=list)
    "Bodies with one step removed; each must differ from `body` on some case."

    def source(self, body: str | None = None) -> str:
        head = f"{self.imports}\n" if self.imports else ""
        return f"{head}def {self.name}({', '.join(self.params)}):\n{body or self.body}"


def _compile(spec: FunctionSpec, body: str | None = None) -> Callable:
    scope: dict = {}
    exec(compile(spec.source(body), f"<{spec.family}>", "exec"), scope)  # trusted reference
    return scope[spec.name]


def _plain(value: object) -> object:
    """`value` as JSON would give it back; raises if it does not survive the trip."""
    back = msgspec.json.decode(msgspec.json.encode(value))
    if back != value or type(back) is not type(value):
        raise ValueError(f"value {value!r} does not survive JSON")
    return back


def _draw_args(spec: FunctionSpec, rng: random.Random, n: int) -> list[list]:
    seen = {json.dumps(a) for a in spec.edge_args}
    out: list[list] = []
    for _ in range(n * 8):
        args = spec.make_args(rng)
        key = json.dumps(args)
        if key not in seen:
            seen.add(key)
            out.append(args)
        if len(out) == n:
            break
    return out


def _cases(fn: Callable, arg_lists: list[list]) -> list[dict]:
    return [{"args": _plain(a), "expected": _plain(fn(*copy.deepcopy(a)))} for a in arg_lists]


def _same(fn: Callable, arg_lists: list[list], cases: list[dict]) -> bool:
    """Whether `fn` (the reference with one step dropped) still gives every expected value."""
    try:
        return all(fn(*copy.deepcopy(a)) == c["expected"] for a, c in zip(arg_lists, cases))
    except Exception:  # noqa: BLE001 - failing without the step means the step matters
        return False


def to_draft(spec: FunctionSpec, rng: random.Random) -> Draft:
    """The Draft of `spec`: cases computed from the reference, prompt worded by `rng`."""
    fn = _compile(spec)
    drawn = _draw_args(spec, rng, VISIBLE + HIDDEN)
    if len(drawn) < VISIBLE + 4:
        raise Redundant(f"{spec.family}: too few distinct inputs")
    visible, hidden = _cases(fn, drawn[:VISIBLE]), _cases(fn, drawn[VISIBLE:])
    edges = _cases(fn, spec.edge_args)
    everything = [c["args"] for c in visible + hidden + edges]
    for body in spec.ablations:
        if _same(_compile(spec, body), everything, visible + hidden + edges):
            raise Redundant(f"{spec.family}: a step changes nothing on the inputs")
    if len({json.dumps(c["expected"]) for c in hidden}) < 2:
        raise Redundant(f"{spec.family}: every hidden case has the same answer")
    say = phrasing.pick(rng, spec.says)
    prompt = phrasing.function_prompt(rng, spec.name, spec.params, say,
                                      [(c["args"], c["expected"]) for c in visible])
    extra = {"robustness": json.dumps(edges)}
    if spec.compare != "exact":
        extra["compare"] = spec.compare
    verifier = Verifier(kind="python_io", visible=json.dumps(visible),
                        hidden=json.dumps(hidden), reference=spec.source(), extra=extra)
    return Draft(prompt=prompt, verifier=verifier, entry_point=spec.name, family=spec.family)
