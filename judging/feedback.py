"""Feedback for another turn: what the model may learn from a failed attempt, within a budget.

Consumes the task and the `Judgement` of the latest turn; produces text for `Turn.feedback`:
compile errors with their line, format problems, and for each failed visible test the test
(or its arguments) with what happened. Hidden and robustness tests are only counted and
their failures named by kind: their inputs, expected values and messages never reach the
model. The text is cut to `budget` characters. It runs nothing.
"""

from __future__ import annotations

import json
from collections import Counter

from bus.messages import Task
from judging import kinds
from judging.judgement import Judgement

_KIND = {"wrong": "wrong answer", "fail": "wrong answer", "error": "error", "timeout": "timeout",
         "exit": "exited", "killed": "crashed", "output_limit": "too much output",
         "unencodable": "unusable return value", "missing": "not run"}


def feedback_for(task: Task, judgement: Judgement, budget: int) -> str:
    structure = judgement.layers[0] if judgement.layers else None
    parts = []
    if judgement.cause == "model.syntax_error":
        parts.append(f"Your code does not compile: {judgement.evidence}")
    elif judgement.cause == "model.truncated":
        parts.append("Your answer was cut off at the length limit: give a shorter one.")
    elif structure is not None and not structure.ok:
        parts.append(f"Your answer does not have the required form: {structure.detail}")
    visible = [t for t in judgement.tests if t.layer == "visible" and t.passed is False]
    for t in visible:
        parts.append(f"Visible test failed: {_what(task, t)}\n  {_outcome(t)}")
    for layer in ("hidden", "robustness"):
        failed = [t for t in judgement.tests if t.layer == layer and t.passed is False]
        counted = [t for t in judgement.tests if t.layer == layer and t.passed is not None]
        if failed:
            kinds = Counter(_KIND.get(t.status, t.status) for t in failed)
            named = ", ".join(f"{n} {k}" for k, n in kinds.most_common())
            parts.append(f"{len(failed)} of {len(counted)} {layer} tests failed ({named}).")
    if not parts:
        parts.append("Your answer was not accepted.")
    text = "\n".join(parts)
    return text if len(text) <= budget else text[: budget - 15] + "\n[... trimmed]"


def _what(task: Task, t) -> str:
    if "source" in t.record:
        return str(t.record["source"])
    index = int(t.id.rsplit("/", 1)[1])
    try:
        case = json.loads(task.verifier.visible)[index]
    except (ValueError, IndexError, TypeError):
        return t.id
    if kinds.of(task).visible_inputs == "stdin":
        return f"input {case.get('stdin', '')[:300]!r}"
    return f"{task.entry_point}(*{json.dumps(case.get('args'))[:300]})"


def _outcome(t) -> str:
    detail = t.detail.strip().splitlines()
    if t.status == "error":
        return "raised: " + " | ".join(detail[-3:])[:600]
    return (detail[-1] if detail else _KIND.get(t.status, t.status))[:600]
