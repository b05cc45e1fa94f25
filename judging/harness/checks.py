"""Split a HumanEval-style `check(candidate)` function into counted, separately run tests.

Consumes test source defining `check(<param>)`; produces a `CheckPlan`: the module-level
code around it, the parameter name, and the body as ordered steps, each a test (it holds an
assert that is not constant) or set-up. The harness runs the steps one by one, so one failing
assert does not hide the others (partial credit), and the judge counts the same tests from
the same source, so a report with fewer results than tests is caught. Body statements that
cannot run on their own (a bare `return`, `nonlocal`) make the whole body one test.
"""

from __future__ import annotations

import ast


class CheckPlan:
    """A `check(candidate)` test file split into statements, each run and counted on its own."""

    def __init__(self, module: str, param: str, steps: list[tuple[str, bool]]) -> None:
        self.module = module
        "Source of everything in the test file except `check` (imports, METADATA, helpers)."
        self.param = param
        "Name `check` calls the candidate by."
        self.steps = steps
        "(source, is_test) for each statement of the body, in order."

    @property
    def tests(self) -> int:
        return sum(1 for _, is_test in self.steps if is_test)


def plan_check(source: str) -> CheckPlan:
    """The plan of `source`; ValueError if it does not define `check(candidate)`."""
    tree = ast.parse(source)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not found or len(found[-1].args.args) != 1:
        raise ValueError("test source must define check(candidate) with one parameter")
    check = found[-1]
    rest = ast.Module(body=[n for n in tree.body if n is not check], type_ignores=[])
    steps = [(ast.unparse(stmt), _is_test(stmt)) for stmt in check.body]
    if not all(_runs_alone(src) for src, _ in steps):
        body = ast.Module(body=check.body, type_ignores=[])
        steps = [(_as_function(body), True)]
    return CheckPlan(ast.unparse(rest), check.args.args[0].arg, steps)


def _is_test(stmt: ast.stmt) -> bool:
    return any(isinstance(n, ast.Assert) and not isinstance(n.test, ast.Constant)
               for n in ast.walk(stmt))


def _runs_alone(src: str) -> bool:
    try:
        compile(src, "<check>", "exec")
        return True
    except SyntaxError:
        return False


def _as_function(body: ast.Module) -> str:
    inner = "\n".join("    " + line for line in ast.unparse(body).splitlines()) or "    pass"
    return f"def _whole_check():\n{inner}\n_whole_check()"
