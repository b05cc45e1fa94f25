"""bench/learning/answer_modes: a run's attempts counted by how the judge ended them."""

from __future__ import annotations

import msgspec
import pytest

from bench.judge.tasks import attempt, io_task
from bench.learning.answer_modes import modes
from bus.messages import Verdict

pytestmark = pytest.mark.unit

TASK = io_task(visible=[([1], 1)], hidden=[([2], 2)], reference="def f(x):\n    return x\n")


def verdict(n: int, outcome: str, cause: str = "", purpose: str = "train", version: int = 3):
    a = attempt(TASK, "def f(x): return x", purpose=purpose, attempt_id=f"t.{n}")
    a = msgspec.structs.replace(a, admitted_version=version,
                                turns=[msgspec.structs.replace(a.turns[0], policy_version=version)])
    return Verdict(verdict_id=a.attempt_id, attempt=a, outcome=outcome,
                   reward=None if outcome == "dropped" else 0.1, cause=cause)


def test_attempts_are_counted_by_domain_purpose_version_and_cause():
    counted = modes([verdict(0, "pass"), verdict(1, "fail", "model.runtime_error"),
                     verdict(2, "fail", "model.runtime_error"), verdict(3, "dropped", "infra.sandbox"),
                     verdict(4, "fail", "model.wrong_answer", version=5),
                     verdict(5, "fail", "model.truncated", purpose="eval", version=12)])
    assert counted == {"python": {
        "eval": {"12": {"model.truncated": 1}},
        "train": {"3": {"dropped": 1, "model.runtime_error": 2, "pass": 1},
                  "5": {"model.wrong_answer": 1}}}}
