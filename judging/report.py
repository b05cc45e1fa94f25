"""Read the harness's report out of an `ExecutionResult`.

Consumes the result's `report` text (JSON lines from the report descriptor) or, for a
backend without one, the nonce-tagged lines on stderr; produces a `Report`. Only records of
the right shape are kept (every field read is type-checked: a test record needs a string id
and status, its measurements must be finite numbers, ...); anything else, whatever it holds,
is counted as `garbage` and never raises. Test records are kept by id (the first wins), and
the nonce of the `start` and `end` records must be the job's, so output printed by the
candidate cannot pass for a report. It does NOT decide what a record means.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from bus.messages import ExecutionResult

MAX_LINE = 4 << 20
"A longer line is garbage without being parsed."

_NUMBER, _TEXT, _FLAG, _ANY = "number", "text", "flag", "any"
TEST_FIELDS = {
    "id": _TEXT, "status": _TEXT, "layer": _TEXT, "detail": _TEXT, "etype": _TEXT, "limit": _TEXT,
    "forged": _TEXT, "origin": _TEXT, "source": _TEXT, "stdout": _TEXT, "stderr_tail": _TEXT,
    "wall_s": _NUMBER, "cpu_s": _NUMBER, "rss_mb": _NUMBER, "run_delay_s": _NUMBER,
    "module_available": _FLAG, "eq_override": _FLAG, "exited_early": _FLAG, "finished": _FLAG,
    "truncated": _FLAG,
}
"Types of the test record's fields; others (value, reference, input, exit_code) may hold any JSON."


@dataclass
class Report:
    """What the harness's report channel said about one job: its records, read back and checked."""

    started: bool = False
    ended: bool = False
    nonce_ok: bool = True
    tests: dict[str, dict] = field(default_factory=dict)
    audit: list[str] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)
    landlock: dict[str, str] = field(default_factory=dict)
    infra: list[str] = field(default_factory=list)
    "'<what>: <detail>' of each `infra` record, in order."
    infra_what: list[str] = field(default_factory=list)
    "The `what` of each `infra` record (reference, spawn, missing_dependency, ...)."
    crash: str = ""
    budget_spent: bool = False
    digest: str = ""
    shipped: dict[str, str] = field(default_factory=dict)
    quality: dict[str, dict] = field(default_factory=dict)
    "Quality measurements by name (lint, types, runtime); the first record of a name wins."
    malformed: set[str] = field(default_factory=set)
    "Ids of test records of the wrong shape (none of them is kept)."
    garbage: int = 0
    "Lines that were not records of a known shape."
    rewards: list[dict] = field(default_factory=list)
    "`reward` records of a rubric job (name, score, weight), in order."


def read_report(result: ExecutionResult, nonce: str) -> Report:
    """The report of `result`, checked against the job's `nonce`. Never raises."""
    text = result.report
    if not text:
        tag = f"\x1ewhet-report:{nonce} "
        # split("\n"), not splitlines(): the tag's \x1e counts as a line break there.
        text = "\n".join(line[len(tag):] for line in result.stderr.split("\n") if line.startswith(tag))
    report = Report()
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line) if len(line) <= MAX_LINE else None
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
            record = None
        if not (isinstance(record, dict) and isinstance(record.get("k"), str) and _take(report, record, nonce)):
            report.garbage += 1
    return report


def _take(report: Report, record: dict, nonce: str) -> bool:
    """Fold one record into the report; False when its shape is wrong (nothing is taken)."""
    kind = record["k"]
    if kind in ("start", "end"):
        if kind == "end" and not (_text(record, "digest") and _shipped(record.get("shipped"))):
            return False
        report.nonce_ok &= record.get("nonce") == nonce
        if kind == "start":
            report.started = True
        else:
            report.ended = True
            report.digest = str(record.get("digest", ""))
            report.shipped = dict(record.get("shipped") or {})
    elif kind == "test":
        if not test_shape_ok(record):
            if isinstance(record.get("id"), str):
                report.malformed.add(record["id"])
            return False
        report.tests.setdefault(record["id"], record)
    elif kind == "audit":
        events, patched = record.get("events", []), record.get("patched", [])
        if not (isinstance(events, list) and isinstance(patched, list)):
            return False
        report.audit.extend(map(_show, events))
        report.patched.extend(p for p in map(_show, patched) if p not in report.patched)
    elif kind == "landlock":
        report.landlock[_show(record.get("who"))] = _show(record.get("status"))
    elif kind == "infra":
        what = record.get("what")
        if not isinstance(what, str):
            return False
        report.infra.append(f"{what}: {_show(record.get('detail'))}")
        report.infra_what.append(what)
    elif kind == "crash":
        report.crash = _show(record.get("error", ""))[-2000:]
    elif kind == "budget":
        report.budget_spent = True
    elif kind == "reward":
        report.rewards.append(record)
    elif kind == "quality":
        for name, value in record.items():
            if name != "k" and isinstance(value, dict):
                report.quality.setdefault(name, value)
    else:
        return False
    return True


def test_shape_ok(record: dict) -> bool:
    """A test record with a string id and status and every known field of its type."""
    if not (isinstance(record.get("id"), str) and isinstance(record.get("status"), str)):
        return False
    return all(name not in record or _typed(record[name], kind) for name, kind in TEST_FIELDS.items())


def _typed(value, kind: str) -> bool:
    if kind == _TEXT:
        return isinstance(value, str)
    if kind == _FLAG:
        return isinstance(value, bool)
    if kind == _NUMBER:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and abs(value) < 1e15 and math.isfinite(value))
    return True


def _text(record: dict, name: str) -> bool:
    return isinstance(record.get(name, ""), str)


def _shipped(value) -> bool:
    return value is None or (isinstance(value, dict) and all(isinstance(v, str) for v in value.values()))


def _show(value) -> str:
    """A field as text, whatever it holds (a huge or nested value is cut, never raises)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)[:2000]
    except (ValueError, TypeError, RecursionError):
        return "?"
