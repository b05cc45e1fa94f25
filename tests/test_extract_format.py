"""The format layer of a completion: one code block, closed, or left open at the end of an
answer the model ended itself (CommonMark closes it there); one the token limit cut is not."""

from __future__ import annotations

import json

import msgspec
import pytest

from bench.judge.tasks import attempt
from bus.messages import Task, Verifier
from judging.config import RewardConfig
from judging.extract import from_completion
from judging.judgement import before_running, candidate_of

pytestmark = pytest.mark.unit

DOC = Task(
    task_id="test/city", env="test", env_version="1", domain="structured", prompt="Extract.",
    verifier=Verifier(kind="structured", hidden=json.dumps([{"path": "city", "equals": "Porto"}]),
                      extra={"schema": json.dumps({"type": "object", "required": ["city"],
                                                   "properties": {"city": {"type": "string"}}})}))
CODE = Task(task_id="test/f", env="test", env_version="1", domain="python", prompt="Write f.",
            entry_point="f", verifier=Verifier(kind="python_io", visible="[]", hidden="[]"))


@pytest.mark.parametrize("completion,ended,ok,why", [
    ('```json\n{"city": "Porto"}\n```\n', True, True, ""),
    ('```json\n{"city": "Porto"}\n', True, True, ""),
    ('{"city": "Porto"}', False, True, ""),
    ('```json\n{"city": "Porto"}\n', False, False, "the token limit cut the answer inside its code block"),
    ('```json\n{"city": "Porto"}\n```\n```json\n{"city": "Porto"}\n', True, False,
     "expected exactly one code block, found 2 (3 fences)"),
])
def test_an_open_block_closes_where_the_model_ended_its_answer(completion, ended, ok, why):
    cand = from_completion(DOC, completion, ended=ended)
    assert (cand.format_ok, cand.format_detail) == (ok, why)
    assert cand.value == {"city": "Porto"}


def test_code_left_open_at_the_end_is_the_same_program_as_code_closed():
    closed = from_completion(CODE, "```python\ndef f():\n    return 1\n```\n")
    left_open = from_completion(CODE, "```python\ndef f():\n    return 1\n")
    assert left_open.code == closed.code and left_open.format_ok and left_open.defines_entry


@pytest.mark.parametrize("finish,outcome,reward", [("stop", "pass", 1.0), ("length", "fail", 0.9)])
def test_the_judge_reads_how_the_answer_ended(finish, outcome, reward):
    """An answer that ends right after its document (no closing fence) passes; the same text
    cut at the token limit keeps the tests' credit but fails the format."""
    a = attempt(DOC, '```json\n{"city": "Porto"}\n')
    a = msgspec.structs.replace(a, turns=[msgspec.structs.replace(a.turns[-1], finish_reason=finish)])
    j = before_running(DOC, candidate_of(a), 1, RewardConfig())
    assert (j.outcome, j.reward) == (outcome, pytest.approx(reward)), j.evidence
