"""Read the harness's report out of an `ExecutionResult`.

Consumes the result's `report` text (JSON lines from the report descriptor) or, for a
backend without one, the nonce-tagged lines on stderr; produces a `Report`. Only lines that
parse are kept, test records are kept by id (the first wins), and the nonce of the `start`
and `end` records must be the job's, so output printed by the candidate cannot pass for a
report. It does NOT decide what a record means.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from bus.messages import ExecutionResult


@dataclass
class Report:
    started: bool = False
    ended: bool = False
    nonce_ok: bool = True
    tests: dict[str, dict] = field(default_factory=dict)
    audit: list[str] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)
    landlock: dict[str, str] = field(default_factory=dict)
    infra: list[str] = field(default_factory=list)
    crash: str = ""
    budget_spent: bool = False
    digest: str = ""
    shipped: dict[str, str] = field(default_factory=dict)
    quality: dict[str, dict] = field(default_factory=dict)
    "Quality measurements by name (lint, types, runtime); the first record of a name wins."
    garbage: int = 0
    "Lines that were not JSON records."
    rewards: list[dict] = field(default_factory=list)
    "`reward` records of a rubric job (name, score, weight), in order."


def read_report(result: ExecutionResult, nonce: str) -> Report:
    """The report of `result`, checked against the job's `nonce`."""
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
            record = json.loads(line)
            kind = record["k"]
        except (ValueError, KeyError, TypeError):
            report.garbage += 1
            continue
        _take(report, kind, record, nonce)
    return report


def _take(report: Report, kind: str, record: dict, nonce: str) -> None:
    if kind == "start":
        report.started = True
        report.nonce_ok &= record.get("nonce") == nonce
    elif kind == "end":
        report.ended = True
        report.nonce_ok &= record.get("nonce") == nonce
        report.digest = str(record.get("digest", ""))
        report.shipped = dict(record.get("shipped") or {})
    elif kind == "test":
        report.tests.setdefault(str(record.get("id")), record)
    elif kind == "audit":
        report.audit.extend(map(str, record.get("events", [])))
        report.patched.extend(p for p in map(str, record.get("patched", [])) if p not in report.patched)
    elif kind == "landlock":
        report.landlock[str(record.get("who"))] = str(record.get("status"))
    elif kind == "infra":
        report.infra.append(f"{record.get('what')}: {record.get('detail')}")
    elif kind == "crash":
        report.crash = str(record.get("error", ""))[-2000:]
    elif kind == "budget":
        report.budget_spent = True
    elif kind == "reward":
        report.rewards.append(record)
    elif kind == "quality":
        for name, value in record.items():
            if name != "k" and isinstance(value, dict):
                report.quality.setdefault(str(name), value)
