"""HumanEval through the judge: the import, every canonical solution, and broken variants."""

from __future__ import annotations

import gzip
import json

import msgspec
import pytest

from bus.messages import Limits
from envs.humaneval import import_file, wheel_path
from tests.support.judging import attempt, backend, humaneval, judge  # noqa: F401

OFF_BY_ONE = {
    "HumanEval/15": "    return ' '.join([str(x) for x in range(n)])\n",
    "HumanEval/23": "    return len(string) + 1\n",
    "HumanEval/24": "    for i in reversed(range(n + 1)):\n        if n % i == 0:\n            return i\n",
    "HumanEval/53": "    return x + y + 1\n",
    "HumanEval/55": "    a, b = 0, 1\n    for _ in range(n + 1):\n        a, b = b, a + b\n    return a\n",
    "HumanEval/60": "    return sum(range(n))\n",
}


@pytest.mark.unit
def test_the_wheel_imports_as_164_heldout_python_check_tasks():
    """Every HumanEval problem becomes a held-out python_check task with its prompt as prefix."""
    tasks = humaneval()
    assert len(tasks) == 164
    t = tasks["HumanEval/0"]
    assert (t.task_id, t.domain, t.split, t.verifier.kind) == ("humaneval/HumanEval/0", "humaneval", "heldout", "python_check")
    assert t.verifier.extra["prefix"] == t.prompt and "def check(candidate)" in t.verifier.hidden
    assert "candidate([1.0, 2.0, 3.0], 0.5) == False" in t.verifier.visible
    assert sum(1 for t in tasks.values() if t.verifier.visible) > 100


@pytest.mark.unit
def test_a_broken_record_names_its_line_and_field_and_the_rest_imports(tmp_path):
    """Bad lines become errors with line and field; the good lines around them still import."""
    rows = [json.loads(line) for line in gzip.open(wheel_path(), "rt")][:3]
    lines = [json.dumps(rows[0]), "{not json", json.dumps({**rows[1], "entry_point": None}),
             json.dumps({k: v for k, v in rows[1].items() if k != "test"}),
             json.dumps({**rows[1], "canonical_solution": "    return (\n"}), json.dumps(rows[2]),
             json.dumps(rows[2])]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    imported = import_file(path)
    assert [t.task_id for t in imported.tasks] == ["humaneval/HumanEval/0", "humaneval/HumanEval/2"]
    assert [(e.line, e.field) for e in imported.errors] == [
        (2, ""), (3, "entry_point"), (4, "test"), (5, "canonical_solution"), (7, "task_id")]
    assert all(str(path) in str(e) for e in imported.errors)


@pytest.mark.bus
async def test_every_canonical_solution_gets_the_full_reward(backend):
    """All 164 canonical solutions pass every layer and get the maximum reward, first time."""
    judged = await judge(backend, [attempt(t, t.verifier.reference) for t in humaneval().values()])
    wrong = [(j.attempt.task.task_id, j.judgement.outcome, j.judgement.cause, j.judgement.evidence[:200])
             for j in judged if j.judgement.reward != 1.0 or j.judgement.outcome != "pass"]
    assert not wrong
    assert all(layer.ok for j in judged for layer in j.judgement.layers)


@pytest.mark.bus
async def test_returning_none_is_a_wrong_answer_for_every_task(backend):
    """A body that returns None fails every task as a wrong answer, never as infrastructure."""
    judged = await judge(backend, [attempt(t, "    return None\n") for t in humaneval().values()])
    causes = {(j.judgement.outcome, j.judgement.cause) for j in judged}
    assert causes == {("fail", "model.wrong_answer")}
    assert max(j.judgement.reward for j in judged) < 0.5


@pytest.mark.bus
async def test_raising_is_a_runtime_error_for_every_task(backend):
    """A body that raises fails every task as a runtime error, with the traceback as evidence."""
    judged = await judge(backend, [attempt(t, "    raise ValueError('broken')\n") for t in humaneval().values()])
    assert {(j.judgement.outcome, j.judgement.cause) for j in judged} == {("fail", "model.runtime_error")}
    assert all("ValueError: broken" in j.judgement.evidence for j in judged)


@pytest.mark.bus
async def test_off_by_one_variants_are_wrong_answers(backend):
    """Off-by-one variants of canonical solutions fail as wrong answers with partial credit at most."""
    tasks = humaneval()
    judged = await judge(backend, [attempt(tasks[k], code) for k, code in OFF_BY_ONE.items()])
    for j in judged:
        assert (j.judgement.outcome, j.judgement.cause) == ("fail", "model.wrong_answer"), j.judgement.evidence
        assert j.judgement.reward < 0.9


@pytest.mark.bus
async def test_an_infinite_loop_is_a_model_timeout(backend):
    """A loop that never ends times out as the model's own fault, with its CPU use as evidence."""
    tasks = humaneval()
    short = [msgspec.structs.replace(tasks[k], limits=Limits(timeout_s=4)) for k in ("HumanEval/23", "HumanEval/53")]
    judged = await judge(backend, [attempt(t, "    while True:\n        pass\n") for t in short], concurrency=2)
    for j in judged:
        assert (j.judgement.outcome, j.judgement.cause) == ("fail", "model.timeout"), j.judgement.evidence
        assert "spinning" in j.judgement.evidence
        assert j.result.wall_s < 4
