"""Score the harness's report into per-test results and the visible, hidden and robustness layers.

Consumes the task, the job spec and the `Report`; produces one `ScoredTest` per test id the
spec demands (a missing record is a failure, never a pass), and a `LayerResult` per layer.
Returned values of cases are compared here, against expected values that never entered the
sandbox; randomized inputs are compared against the reference's values. A test marked
`invalid` (the reference itself rejects it) counts neither way. A record of the wrong shape
counts as missing, and a value that cannot be read or compared as wrong: scoring never
raises. It does NOT attribute causes or compute rewards.
"""

from __future__ import annotations

import json

from bus.messages import LayerResult, Task
from judging.compare import same_stdout, same_value, show
from judging.findings import ScoredTest
from judging import kinds
from judging.harness import wire
from judging.jobs import expected_ids
from judging.report import Report, test_shape_ok

TEST_LAYERS = ("visible", "hidden", "robustness")


def score_tests(task: Task, spec: dict, report: Report) -> list[ScoredTest]:
    """One result per expected test id, in layer order."""
    expected = _expected_outputs(task)
    fixed = len(spec.get("robustness", {}).get("cases", []))
    out = []
    for layer, ids in expected_ids(spec).items():
        for i, test_id in enumerate(ids):
            rec = report.tests.get(test_id)
            if test_id in report.malformed or (rec is not None and not (isinstance(rec, dict) and test_shape_ok(rec))):
                out.append(ScoredTest(test_id, layer, False, "malformed", "its record is of the wrong shape", {}))
                continue
            if rec is None:
                why = "not run: the harness budget was spent" if report.budget_spent else "not reported"
                out.append(ScoredTest(test_id, layer, False, "missing", why, {}))
                continue
            status = rec["status"]
            if status == "invalid":
                out.append(ScoredTest(test_id, layer, None, status, str(rec.get("detail", "")), rec))
            elif status != "ok":
                out.append(ScoredTest(test_id, layer, False, status, str(rec.get("detail", ""))[:1500], rec))
            else:
                key = (layer, i) if layer != "robustness" or i < fixed else None
                passed, detail = _judge_ok(task, rec, expected.get(key) if key else None, key is None)
                out.append(ScoredTest(test_id, layer, passed, "ok" if passed else "wrong", detail, rec))
    return out


def _judge_ok(task: Task, rec: dict, expected, against_reference: bool) -> tuple[bool, str]:
    """Whether an `ok` record's value is right; a value it cannot read or compare is wrong."""
    try:
        return _compare(task, rec, expected, against_reference)
    except Exception as exc:  # noqa: BLE001 - whatever a returned value holds, it is one wrong answer
        return False, f"returned a value the judge cannot compare: {type(exc).__name__}"


def _compare(task: Task, rec: dict, expected, against_reference: bool) -> tuple[bool, str]:
    compare = kinds.of(task).compare
    if compare == "check" and not against_reference:
        return True, ""
    if compare == "stdout":
        want = rec.get("reference") if against_reference else expected
        mode = task.verifier.extra.get("compare", "text")
        ok = isinstance(want, str) and same_stdout(str(rec.get("stdout", "")), want, mode)
        return ok, "" if ok else f"printed {show(rec.get('stdout', ''))}, expected {show(want)}"
    try:
        got = wire.decode(rec.get("value"))
        want = wire.decode(rec.get("reference")) if against_reference else expected
    except ValueError as exc:
        return False, f"returned a value the judge cannot read: {exc}"
    mode = "float" if against_reference else task.verifier.extra.get("compare", "exact")
    ok = same_value(got, want, mode, from_json=not against_reference)
    return ok, "" if ok else f"returned {show(got)}, expected {show(want)}"


def _expected_outputs(task: Task) -> dict[tuple[str, int], object]:
    v = task.verifier
    field = kinds.of(task).expected
    if not field:
        return {}
    out = {}
    for layer, text in (("visible", v.visible), ("hidden", v.hidden),
                        ("robustness", v.extra.get("robustness", ""))):
        cases = json.loads(text) if text.strip() else []
        for i, case in enumerate(cases):
            out[(layer, i)] = case.get(field) if isinstance(case, dict) else None
    return out


NEAR_EVIDENCE = 2
"Counted near inputs a visible test needs before its pass can be withheld for them."


def credit_by_behaviour(tests: list[ScoredTest]) -> list[ScoredTest]:
    """`tests` with a visible pass withheld where the candidate is wrong on every one of its
    near inputs (robustness records whose `origin` is that test, at least NEAR_EVIDENCE of them
    counted): code that computes its answer is right somewhere near an input it gets right; an
    answer kept by rote (a table, a hash, a match on the visible inputs) is not, so it earns
    what a constant would, never more."""
    near: dict[str, list[bool]] = {}
    for t in tests:
        origin = t.record.get("origin")
        if t.layer == "robustness" and t.passed is not None and isinstance(origin, str):
            near.setdefault(origin, []).append(bool(t.passed))
    out = []
    for t in tests:
        around = near.get(t.id, [])
        if t.layer == "visible" and t.passed and len(around) >= NEAR_EVIDENCE and not any(around):
            t = ScoredTest(t.id, t.layer, False, "wrong", f"passes this example but none of the {len(around)} "
                           "inputs near it: not credited", t.record)
        out.append(t)
    return out


def layer_results(tests: list[ScoredTest]) -> list[LayerResult]:
    """Visible, hidden and robustness layers (a layer without counted tests has total 0)."""
    layers = []
    for name in TEST_LAYERS:
        mine = [t for t in tests if t.layer == name]
        counted = [t for t in mine if t.passed is not None]
        passed = sum(1 for t in counted if t.passed)
        failed = [f"{t.id} {t.status}" for t in counted if not t.passed]
        invalid = len(mine) - len(counted)
        detail = ", ".join(failed[:5]) + (f" (+{len(failed) - 5} more)" if len(failed) > 5 else "")
        if invalid:
            detail = (detail + "; " if detail else "") + f"{invalid} invalid, not counted"
        layers.append(LayerResult(name=name, passed=passed, total=len(counted),
                                  ok=passed == len(counted), detail=detail))
    return layers
