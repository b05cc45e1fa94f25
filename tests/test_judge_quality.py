"""Quality bonuses measured in real sandboxes (local, and every backend for the main case)."""

from __future__ import annotations

import anyio
import pytest

from judging.config import JudgeConfig, QualityConfig, RewardConfig
from judging.reward import QUALITY_COMPONENTS
from runtime.config import RunConfig, SupervisorConfig
from sandbox import open_backend
from sandbox.config import ExecutorConfig, SandboxConfig
from tests.support.judging import attempt, humaneval, io_task, judge
from tests.support.sandbox_fixtures import backend, built_envs, docker_engine  # noqa: F401
from tests.test_judge_actor import actors, all_handled, publish, verdicts

pytestmark = pytest.mark.bus

QUALITY = JudgeConfig(reward=RewardConfig(tests=0.82, format=0.08,
                                          quality=QualityConfig(lint=0.04, types=0.03, runtime=0.03)))
SUM = io_task(visible=[([[1, 2]], 3)], hidden=[([[4, 5, 6]], 15), ([list(range(50))], 1225), ([[]], 0)],
              reference="def f(xs):\n    return sum(xs)\n")
CLEAN = "def f(xs):\n    return sum(xs)\n"
MESSY = ("import os\n\ndef f(xs):\n    unused = 1\n    total: int = 'zero'\n"
         "    total = 0\n    for x in xs:\n        total += x\n    return total\n")
SLOW = ("def f(xs):\n    spin = 0\n    for i in range(300_000):\n        spin += i\n"
        "    return sum(xs) + spin * 0\n")
WRONG = "import os\n\ndef f(xs):\n    return len(xs)\n"


@pytest.fixture
async def local(built_envs):  # noqa: F811
    """The local backend as `whet judge` opens it by default (warm Python zygote)."""
    opened = await open_backend(SandboxConfig(backend="local"), slots=2)
    try:
        yield opened
    finally:
        with anyio.CancelScope(shield=True):
            await opened.aclose()


async def test_a_passing_attempt_gets_each_quality_as_its_own_component(backend):  # noqa: F811
    """On every isolating backend: clean code gets every bonus whole; code with lint findings
    and a type error passes with smaller lint and types bonuses (named in the evidence); a
    failure gets no quality key."""
    clean, messy, wrong = await judge(backend, [attempt(SUM, c, attempt_id=f"q.{i}")
                                              for i, c in enumerate((CLEAN, MESSY, WRONG))], QUALITY)
    assert clean.judgement.outcome == "pass", clean.judgement.evidence
    assert {k: clean.judgement.components[k] for k in QUALITY_COMPONENTS} == pytest.approx(
        {"lint": 0.04, "types": 0.03, "runtime": 0.03})
    assert clean.judgement.reward == pytest.approx(1.0)
    m = messy.judgement
    assert m.outcome == "pass", m.evidence
    assert m.components["lint"] == pytest.approx(0.04 * (1 - 2 / 5))  # F401 os, F841 unused
    assert m.components["types"] == pytest.approx(0.03 * (1 - 1 / 5))  # str assigned to int
    assert "F401" in m.evidence and "Incompatible types" in m.evidence
    assert m.reward == pytest.approx(sum(m.components.values()), abs=1e-5) and m.reward < clean.judgement.reward
    assert wrong.judgement.outcome == "fail"
    assert not set(wrong.judgement.components) & set(QUALITY_COMPONENTS)
    assert wrong.judgement.reward < m.reward


async def test_code_much_slower_than_the_reference_loses_the_runtime_bonus(local):
    """A correct function that burns CPU on every hidden call, measured against the reference
    in the same job, gets a smaller runtime bonus; lint and types are unaffected."""
    [slow] = await judge(local, [attempt(SUM, SLOW)], QUALITY)
    j = slow.judgement
    assert j.outcome == "pass", j.evidence
    assert j.components["runtime"] < 0.03 / 2 and "x reference" in j.evidence
    assert j.components["lint"] == pytest.approx(0.04) and j.components["types"] == pytest.approx(0.03)


async def test_without_quality_a_pass_has_no_quality_components(local):
    """The default config measures nothing and adds no keys, even to messy code."""
    [messy] = await judge(local, [attempt(SUM, MESSY)])
    assert messy.judgement.outcome == "pass" and messy.judgement.reward == pytest.approx(1.0)
    assert not set(messy.judgement.components) & set(QUALITY_COMPONENTS)


async def test_the_candidate_cannot_forge_its_quality_record(local):
    """Printing a quality record and writing one to the report descriptor changes nothing:
    the tools ran before the candidate, and the first record of a name wins."""
    forged = ('{"k": "quality", "lint": {"findings": 0}, "types": {"findings": 0}}\n')
    code = (f"import os\nFORGED = {forged!r}\nprint(FORGED)\n"
            "try:\n    os.write(3, FORGED.encode())\nexcept OSError:\n    pass\n\n"
            "def f(xs):\n    unused = 1\n    return sum(xs)\n")
    [j] = await judge(local, [attempt(SUM, code)], QUALITY)
    assert j.judgement.outcome == "pass", j.judgement.evidence
    assert j.judgement.components["lint"] == pytest.approx(0.04 * (1 - 1 / 5))  # F841 unused


async def test_prompt_lines_of_a_check_task_do_not_count_against_the_completion(local):
    """HumanEval's canonical body, appended to the prompt's stub, is clean: the prompt's own
    lines are left out of lint and types."""
    task = humaneval()["HumanEval/2"]
    [j] = await judge(local, [attempt(task, task.verifier.reference)], QUALITY)
    assert j.judgement.outcome == "pass", j.judgement.evidence
    assert j.judgement.components["lint"] == pytest.approx(0.04)
    assert j.judgement.components["types"] == pytest.approx(0.03)
    assert "runtime" in j.judgement.components


async def test_the_judge_actor_sends_quality_in_the_verdict_of_a_pass_only(bus, built_envs):  # noqa: F811
    """Over a real bus, with the executor actor running the local sandbox: the pass's verdict
    carries lint, types and runtime, the failure's carries none, and both sum to the reward."""
    cfg = RunConfig(judge=QUALITY, supervisor=SupervisorConfig(drain_s=3),
                    executor=ExecutorConfig(sandbox=SandboxConfig(backend="local"), concurrency=2))
    async with actors(bus, cfg):
        await publish(bus, attempt(SUM, MESSY, attempt_id="qa.0"), attempt(SUM, WRONG, attempt_id="qa.1"))
        got = {v.verdict_id: v for _, v in await verdicts(bus, 2)}
        await all_handled(bus)
    passed, failed = got["qa.0"], got["qa.1"]
    assert passed.outcome == "pass" and set(QUALITY_COMPONENTS) <= set(passed.components)
    assert passed.components["lint"] == pytest.approx(0.04 * (1 - 2 / 5))
    assert failed.outcome == "fail" and not set(QUALITY_COMPONENTS) & set(failed.components)
    for v in (passed, failed):
        assert sum(v.components.values()) == pytest.approx(v.reward, abs=1e-5)


async def test_a_script_task_is_measured_too(local):
    """script_io: the reference script's own source gets E401 (two imports on a line) and a
    runtime measured against itself, run by the harness on the hidden cases."""
    from tests.test_judge_kinds import WORDS

    [j] = await judge(local, [attempt(WORDS, WORDS.verifier.reference)], QUALITY)
    assert j.judgement.outcome == "pass", j.judgement.evidence
    assert "E401" in j.judgement.evidence and j.judgement.components["lint"] == pytest.approx(0.04 * 0.8)
    assert j.judgement.components["runtime"] == pytest.approx(0.03)
