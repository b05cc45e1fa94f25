"""Mutants of a reference solution, for the mutation gate. Pure functions: text in, text out.

Consumes Python source (a function or a script) or a JSON document; produces `Mutant`s,
each one small deliberate bug with a description naming the line and the change:
- operator swaps (`+`/`-`, `<`/`<=`, `==`/`!=`, `and`/`or`, `in`/`not in`, `not` removed);
- off-by-one (integer constants +1 and -1, `range(n)` to `range(n + 1)`);
- constant changes (strings emptied, booleans flipped, other integers to 0);
- dropped statements (one statement removed from a body).
JSON documents get the same four kinds on their values: booleans flipped, numbers off by
one, strings changed, keys and list items dropped. It runs nothing: `envs.gates` does.
"""

from __future__ import annotations

import ast
import json
import random
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class Mutant:
    """One deliberately broken variant of a reference."""

    operator: str
    "'operator_swap', 'off_by_one', 'constant_change' or 'dropped_statement'."
    description: str
    "Where and what changed, e.g. \"line 3: '<' -> '<='\"."
    source: str
    "The mutated program (or JSON document)."


_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult,
          ast.Div: ast.Mult, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
_CMPOP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
          ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot,
          ast.IsNot: ast.Is}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/",
           ast.Mod: "%", ast.Pow: "**", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
           ast.Eq: "==", ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in", ast.Is: "is",
           ast.IsNot: "is not", ast.And: "and", ast.Or: "or"}


def _edits(node: ast.AST) -> Iterator[tuple[str, str, object]]:
    """(operator, change, payload) for every mutation that applies to `node` itself."""
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _BINOP:
        new = _BINOP[type(node.op)]
        yield "operator_swap", f"'{_SYMBOL[type(node.op)]}' -> '{_SYMBOL[new]}'", new
    elif isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            new = _CMPOP[type(op)]
            yield "operator_swap", f"'{_SYMBOL[type(op)]}' -> '{_SYMBOL[new]}'", (i, new)
    elif isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield "operator_swap", f"'{_SYMBOL[type(node.op)]}' -> '{_SYMBOL[new]}'", new
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        yield "operator_swap", f"'{ast.unparse(node)}' -> '{ast.unparse(node.operand)}'", None
    elif isinstance(node, ast.Constant):
        yield from _constant_edits(node.value)
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id == "range" and node.args):
        yield "off_by_one", f"'{ast.unparse(node)}' upper bound + 1", None


def _constant_edits(value: object) -> Iterator[tuple[str, str, object]]:
    if isinstance(value, bool):
        yield "constant_change", f"{value} -> {not value}", not value
    elif isinstance(value, int):
        for delta in (1, -1):
            yield "off_by_one", f"{value} -> {value + delta}", value + delta
        if value not in (0, 1, -1):
            yield "constant_change", f"{value} -> 0", 0
    elif isinstance(value, str):
        new = "" if value else "_"
        yield "constant_change", f"{value!r} -> {new!r}", new


def _apply(node: ast.AST, payload: object) -> ast.AST | None:
    """Mutate `node` in place (or return its replacement)."""
    if isinstance(node, (ast.BinOp, ast.AugAssign, ast.BoolOp)):
        node.op = payload()  # type: ignore[operator, misc]
    elif isinstance(node, ast.Compare):
        i, new = payload  # type: ignore[misc]
        node.ops[i] = new()
    elif isinstance(node, ast.UnaryOp):
        return node.operand
    elif isinstance(node, ast.Constant):
        node.value = payload
    elif isinstance(node, ast.Call):
        last = node.args[1] if len(node.args) > 1 else node.args[0]
        bumped = ast.BinOp(left=last, op=ast.Add(), right=ast.Constant(1))
        node.args[1 if len(node.args) > 1 else 0] = bumped
    return None


def _docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


def _skipped(stmt: ast.stmt) -> bool:
    # Dropping a def or an import only makes a NameError: a free kill that would flatter
    # weak tests, so those are not mutants.
    return isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import,
                             ast.ImportFrom, ast.Pass)) or _docstring(stmt)


def _replace_child(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new


def _candidates(tree: ast.AST, first_line: int) -> list[tuple[int, str, str, object]]:
    """(node index in ast.walk order, operator, description, payload) of every mutation."""
    out = []
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and _docstring(n)}
    for index, node in enumerate(ast.walk(tree)):
        line = getattr(node, "lineno", first_line)
        if line < first_line or id(node) in docstrings:
            continue
        for operator, change, payload in _edits(node):
            out.append((index, operator, f"line {line}: {change}", payload))
        for field, body in ast.iter_fields(node):
            if field in ("body", "orelse", "finalbody") and isinstance(body, list):
                for pos, stmt in enumerate(body):
                    if not _skipped(stmt) and stmt.lineno >= first_line:
                        text = ast.unparse(stmt).splitlines()[0][:60]
                        out.append((index, "dropped_statement",
                                    f"line {stmt.lineno}: dropped `{text}`", (field, pos)))
    return out


def _build(source: str, index: int, operator: str, payload: object) -> str:
    tree = ast.parse(source)
    nodes = list(ast.walk(tree))
    node = nodes[index]
    if operator == "dropped_statement":
        field, pos = payload  # type: ignore[misc]
        body = getattr(node, field)
        body.pop(pos)
        if not body and field == "body":
            body.append(ast.Pass())
    else:
        replacement = _apply(node, payload)
        if replacement is not None:
            parent = next(n for n in nodes for c in ast.iter_child_nodes(n) if c is node)
            _replace_child(parent, node, replacement)
    return ast.unparse(ast.fix_missing_locations(tree))


def python_mutants(source: str, *, limit: int = 0, seed: int = 0,
                   first_line: int = 1) -> list[Mutant]:
    """Distinct mutants of `source` (only lines >= `first_line`), at most `limit` (0: all).

    When limited, operators take turns so every kind is represented, in a seeded order.
    Mutants equal to the original, or to each other, are dropped.
    """
    original = ast.unparse(ast.parse(source))
    by_operator: dict[str, list[Mutant]] = {}
    seen = {original}
    for index, operator, description, payload in _candidates(ast.parse(source), first_line):
        text = _build(source, index, operator, payload)
        if text in seen:
            continue
        seen.add(text)
        by_operator.setdefault(operator, []).append(Mutant(operator, description, text))
    return _interleave(by_operator, limit, seed)


def _interleave(groups: dict[str, list[Mutant]], limit: int, seed: int) -> list[Mutant]:
    rng = random.Random(seed)
    queues = []
    for name in sorted(groups):
        items = list(groups[name])
        rng.shuffle(items)
        queues.append(items)
    out: list[Mutant] = []
    while any(queues) and (not limit or len(out) < limit):
        for q in queues:
            if q and (not limit or len(out) < limit):
                out.append(q.pop())
    return out


def json_mutants(document: str, *, limit: int = 0, seed: int = 0) -> list[Mutant]:
    """Mutants of a JSON document: each value changed, each key and list item dropped."""
    by_operator: dict[str, list[Mutant]] = {}
    for steps, operator, change, mutate in _json_edits(json.loads(document), ()):
        text = json.dumps(mutate(json.loads(document), steps))
        by_operator.setdefault(operator, []).append(
            Mutant(operator, f"{_path(steps)}: {change}", text))
    return _interleave(by_operator, limit, seed)


def _path(steps: tuple) -> str:
    return "$" + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps)


def _json_edits(value: object, steps: tuple):
    """(steps, operator, change, mutate(root, steps) -> root) for every edit under value."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield steps + (key,), "dropped_statement", "key dropped", _drop
            yield from _json_edits(child, steps + (key,))
    elif isinstance(value, list):
        if value:
            yield steps + (len(value) - 1,), "dropped_statement", "last item dropped", _drop
        for i, child in enumerate(value):
            yield from _json_edits(child, steps + (i,))
    else:
        for operator, change, new in _scalar_edits(value):
            yield steps, operator, change, _setter(new)


def _scalar_edits(value: object):
    if isinstance(value, bool):
        yield "operator_swap", f"{value} -> {not value}", not value
    elif isinstance(value, (int, float)):
        yield "off_by_one", f"{value} -> {value + 1}", value + 1
    elif isinstance(value, str):
        new = value[:-1] if len(value) > 1 else value + "x"
        yield "constant_change", f"{value!r} -> {new!r}", new
    elif value is None:
        yield "constant_change", "null -> 0", 0


def _parent(root, steps: tuple):
    for step in steps[:-1]:
        root = root[step]
    return root


def _drop(root, steps: tuple):
    del _parent(root, steps)[steps[-1]]
    return root


def _setter(new: object):
    def mutate(root, steps: tuple):
        if not steps:
            return new
        _parent(root, steps)[steps[-1]] = new
        return root
    return mutate
