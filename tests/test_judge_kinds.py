"""Every verifier kind end to end through a real sandbox, plus format, turns and determinism."""

from __future__ import annotations

import json

import msgspec
import pytest

from bus.messages import Limits, Task, Verifier
from judging.config import JudgeConfig, RewardConfig
from judging.extract import from_completion
from judging.jobs import build_job
from tests.support.judging import attempt, backend, humaneval, io_task, judge  # noqa: F401

pytestmark = pytest.mark.bus

SECRET = 987654321

MEDIAN = io_task(
    visible=[([[3, 1, 2]], 2), ([[5, 4]], 4.5)],
    hidden=[([[9, 7, 8, 6]], 7.5), ([[1000, 1, 2]], 2), ([[SECRET, SECRET, SECRET]], SECRET)],
    robustness=[([[4]], 4), ([[2, 2]], 2)],
    reference="def median(xs):\n    s = sorted(xs)\n    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n",
    entry="median", compare="float")

WORDS = Task(
    task_id="test/words", env="test", env_version="1", domain="data", prompt="Count words.",
    limits=Limits(timeout_s=5),
    verifier=Verifier(
        kind="script_io",
        visible=json.dumps([{"stdin": "a b a\n", "expected_stdout": "a 2\nb 1\n"}]),
        hidden=json.dumps([{"stdin": "", "files": {"in.txt": "x y\ny\n"}, "expected_stdout": "y 2\nx 1\n"},
                           {"stdin": "q\n", "expected_stdout": "q 1\n"}]),
        reference=("import os, sys, collections\ntext = open('in.txt').read() if os.path.exists('in.txt') "
                   "else sys.stdin.read()\nc = collections.Counter(text.split())\n"
                   "for w, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])):\n    print(w, n)\n")))

PROFILE = Task(
    task_id="test/profile", env="test", env_version="1", domain="structured", prompt="Extract.",
    verifier=Verifier(
        kind="structured",
        hidden=json.dumps([{"path": "name", "equals": "Ada"}, {"path": "langs", "contains": "python"},
                           {"path": "email", "matches": r"[a-z]+@[a-z]+\.org"}]),
        extra={"schema": json.dumps({"type": "object", "required": ["name", "langs", "email"],
                                     "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                                                    "langs": {"type": "array", "items": {"type": "string"}}}})}))


async def test_python_io_compares_outside_and_never_ships_expected_values(backend):
    """A correct function passes; expected values are nowhere in the job the sandbox gets."""
    good = "def median(xs):\n    s = sorted(xs)\n    m = len(s) // 2\n    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2\n"
    job = build_job(MEDIAN, from_completion(MEDIAN, good))
    assert str(SECRET * 2) not in job.stdin.decode() and b"expected" not in job.stdin
    [j] = await judge(backend, [attempt(MEDIAN, good)])
    assert (j.judgement.outcome, j.judgement.reward) == ("pass", 1.0), j.judgement.evidence
    rob = next(layer for layer in j.judgement.layers if layer.name == "robustness")
    assert rob.total >= 2 + 5


async def test_python_io_gives_partial_credit_and_names_the_wrong_case(backend):
    """A solution that ignores even lengths passes some tests and is a wrong answer on the rest."""
    [j] = await judge(backend, [attempt(MEDIAN, "def median(xs):\n    return sorted(xs)[len(xs) // 2]\n")])
    assert (j.judgement.outcome, j.judgement.cause) == ("fail", "model.wrong_answer")
    assert "visible/1: returned 5, expected 4.5" in j.judgement.evidence
    assert 0.1 < j.judgement.reward < 1.0


async def test_script_io_runs_each_case_with_its_stdin_and_files(backend):
    """A script is run per case (stdin and files in its directory); its output is compared outside."""
    judged = await judge(backend, [attempt(WORDS, WORDS.verifier.reference),
                                   attempt(WORDS, "import sys\nprint(sys.stdin.read().upper())\n")])
    assert (judged[0].judgement.outcome, judged[0].judgement.reward) == ("pass", 1.0), judged[0].judgement.evidence
    assert (judged[1].judgement.outcome, judged[1].judgement.cause) == ("fail", "model.wrong_answer")
    assert b"y 2" not in build_job(WORDS, from_completion(WORDS, "print(1)")).stdin


@pytest.mark.parametrize("completion,outcome,cause,reward", [
    ('{"name": "Ada", "langs": ["python", "c"], "email": "ada@lovelace.org"}', "pass", "", 1.0),
    ('```json\n{"name": "Ada", "langs": ["c"], "email": "ada@lovelace.org"}\n```', "fail", "model.wrong_answer", 0.7),
    ('{"name": "Ada", "langs": ["python"], "email": "ada@lovelace.org", "age": -3}', "fail", "model.format", 0.9),
    ('{"name": "Ada", ', "fail", "model.syntax_error", -0.5),
])
async def test_structured_documents_are_judged_without_running(backend, completion, outcome, cause, reward):
    """Schema problems land in the structure layer, content rules in the hidden layer."""
    [j] = await judge(backend, [attempt(PROFILE, completion)])
    assert (j.judgement.outcome, j.judgement.cause) == (outcome, cause), j.judgement.evidence
    assert j.judgement.reward == pytest.approx(reward) and j.result is None


@pytest.mark.parametrize("completion,reward,format_ok", [
    ("Here:\n```python\ndef median(xs):\n    return sorted(xs)[len(xs) // 2] if len(xs) % 2 else "
     "sum(sorted(xs)[len(xs) // 2 - 1:len(xs) // 2 + 1]) / 2\n```\nDone.", 1.0, True),
    ("```python\nimport math\n```\n```python\ndef median(xs):\n    return sorted(xs)[len(xs) // 2] if len(xs) % 2 else "
     "sum(sorted(xs)[len(xs) // 2 - 1:len(xs) // 2 + 1]) / 2\n```", 0.9, False),
])
async def test_the_format_term_rewards_exactly_one_code_block(backend, completion, reward, format_ok):
    """A single fenced block gets the format bonus; two blocks pass the tests without it."""
    [j] = await judge(backend, [attempt(MEDIAN, completion)])
    assert j.judgement.reward == pytest.approx(reward), j.judgement.evidence
    assert j.judgement.components["format"] == (0.1 if format_ok else 0.0)


async def test_a_crash_loses_only_its_format_bonus_where_configured(backend):
    """With `crash_keeps_format = false` a script that crashes fails as before, without the
    format bonus, below one that runs and answers wrong (which keeps it); by default both
    get the bonus."""
    crash, wrong = "import sys\nprint(undefined_name)\n", "import sys\nprint(sys.stdin.read().upper())\n"
    off = JudgeConfig(reward=RewardConfig(crash_keeps_format=False))
    by_default = [j.judgement for j in await judge(backend, [attempt(WORDS, crash)])]
    judged = [j.judgement for j in await judge(backend, [attempt(WORDS, crash), attempt(WORDS, wrong)],
                                               config=off)]
    assert [(j.cause, j.reward) for j in by_default] == [("model.runtime_error", pytest.approx(0.1))]
    assert [(j.outcome, j.cause, j.components["format"]) for j in judged] == [
        ("fail", "model.runtime_error", 0.0), ("fail", "model.wrong_answer", 0.1)]
    assert judged[0].reward == pytest.approx(0.0) and judged[0].layers == by_default[0].layers


async def test_extra_turns_cost_a_penalty_each(backend):
    """A pass on the third turn scores the full reward minus two turn penalties."""
    t = humaneval()["HumanEval/53"]
    [j] = await judge(backend, [attempt(t, "    return x\n", "    return y\n", "    return x + y\n")])
    assert j.judgement.outcome == "pass" and j.judgement.reward == pytest.approx(0.9)
    assert j.judgement.components["turns"] == pytest.approx(-0.1)


async def test_judging_the_same_attempts_twice_gives_the_same_verdicts(backend):
    """Outcome, reward, components, cause, evidence, layers and output digest repeat exactly."""
    he = humaneval()
    batch = [attempt(he["HumanEval/53"], "    return x + y\n"), attempt(he["HumanEval/32"], he["HumanEval/32"].verifier.reference),
             attempt(he["HumanEval/12"], "    return None\n"), attempt(he["HumanEval/4"], "    raise KeyError(1)\n"),
             attempt(MEDIAN, "def median(xs):\n    return xs[0]\n"), attempt(WORDS, WORDS.verifier.reference),
             attempt(MEDIAN, "import os\nos._exit(0)\n")]
    first, second = await judge(backend, batch), await judge(backend, batch)
    for a, b in zip(first, second):
        va, vb = a.verdict(), b.verdict()
        same = lambda v: msgspec.structs.replace(v, judged_at=0.0)  # noqa: E731
        assert same(va) == same(vb), (va.cause, va.evidence, vb.evidence)
        assert a.judgement.digest == b.judgement.digest
    assert len({j.judgement.digest for j in first}) == len(first)


@pytest.mark.parametrize("code,cause", [
    ("    x = bytearray(10 ** 11)\n    return x\n", "model.oom"),
    ("    while True:\n        print('spam' * 100)\n", "model.output_limit"),
    ("    import sys\n    sys.exit(3)\n", "model.suspicious_exit"),
    ("    return add(x, y)\n", "model.runtime_error"),
    ("    import numpy_that_does_not_exist\n    return x + y\n", "model.runtime_error"),
])
async def test_each_model_cause_is_named_with_evidence(backend, code, cause):
    """Its own allocation, its own flood, its own exit and its own errors are the model's."""
    [j] = await judge(backend, [attempt(humaneval()["HumanEval/53"], code)])
    assert (j.judgement.outcome, j.judgement.cause) == ("fail", cause), j.judgement.evidence
    assert j.judgement.evidence and j.retries == 0
