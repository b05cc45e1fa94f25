"""bench/learning/rejudge_rounds.py: an eval verdict of a finished run under today's judge."""

from __future__ import annotations

import msgspec
import pytest

from bench.judge.tasks import attempt
from bench.learning.rejudge_rounds import rejudged, summary
from bus.messages import LayerResult, Verdict
from judging.config import RewardConfig
from tests.test_extract_format import CODE, DOC

pytestmark = pytest.mark.unit

OLD_FENCE = "format: expected exactly one closed code block, found 1 (1 fences)"


def verdict(task, completion, finish, outcome, reward, cause="", detail="", version=0):
    a = attempt(task, completion, purpose="eval")
    a = msgspec.structs.replace(a, admitted_version=version,
                                turns=[msgspec.structs.replace(a.turns[-1], finish_reason=finish)])
    layers = [LayerResult(name="structure", passed=1, total=2, ok=not detail, detail=detail)]
    return Verdict(verdict_id=a.attempt_id, attempt=a, outcome=outcome, reward=reward,
                   cause=cause, layers=layers, trainable=False)


def test_a_document_is_judged_again_whole():
    then = verdict(DOC, '```json\n{"city": "Porto"}\n', "stop", "fail", 0.9, "model.format", OLD_FENCE)
    assert rejudged(then, RewardConfig()) == ("pass", 1.0, "judged again")
    cut = verdict(DOC, '```json\n{"city": "Porto"}\n', "length", "fail", 0.9, "model.format", OLD_FENCE)
    assert rejudged(cut, RewardConfig())[:2] == ("fail", 0.9)


def test_a_program_whose_one_failure_was_the_open_fence_passes_with_the_format_bonus():
    code = "```python\ndef f():\n    return 1\n"
    then = verdict(CODE, code, "stop", "fail", 0.9, "model.format", OLD_FENCE)
    assert rejudged(then, RewardConfig()) == ("pass", pytest.approx(1.0), "format read again")
    wrong = verdict(CODE, code, "stop", "fail", 0.4, "model.wrong_answer", OLD_FENCE)
    assert rejudged(wrong, RewardConfig()) == ("fail", 0.4, "unchanged")
    cut = verdict(CODE, code, "length", "fail", 0.9, "model.format", OLD_FENCE)
    assert rejudged(cut, RewardConfig()) == ("fail", 0.9, "unchanged")


def test_the_summary_counts_passes_and_names_each_changed_task():
    rows = [verdict(DOC, '```json\n{"city": "Porto"}\n', "stop", "fail", 0.9, "model.format", OLD_FENCE,
                    version=3),
            verdict(CODE, "def f():\n    return 1\n", "stop", "pass", 1.0, version=3)]
    [(version, r)] = summary(rows, RewardConfig()).items()
    assert (version, r["passes_then"], r["passes_now"]) == ("3", 1, 2)
    assert list(r["changed"]) == ["test/city"] and r["reward_now"] == pytest.approx(1.0)
