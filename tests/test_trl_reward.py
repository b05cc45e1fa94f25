"""The TRL reward function (bench.vs_trl.trl_reward) against the judge itself, on the local sandbox."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from bus.messages import Attempt, Turn
from envs import registry
from envs.config import EnvEntry
from envs.environment import generate
from judging.config import JudgeConfig
from judging.offline import judge_all
from bench.vs_trl.trl_reward import JudgeReward, task_column
from sandbox import open_backend
from sandbox.config import SandboxConfig
from tests.support.sandbox_fixtures import built_envs  # noqa: F401

pytestmark = pytest.mark.bus

SANDBOX = SandboxConfig(backend="local", warm_python=True)


def _cases() -> list[tuple]:
    """(task, completion) pairs: a reference, a wrong answer, a syntax error and an early exit
    at a generated task of each domain."""
    pairs = []
    for name in ("python_functions", "data_scripts", "structured_output"):
        task = next(generate(registry.resolve(name, EnvEntry()), 1, seed=12, levels=[0]))
        ref = task.verifier.reference
        if task.verifier.kind == "structured":
            pairs += [(task, f"```json\n{ref}\n```"), (task, '```json\n{"name": 1}\n```'),
                      (task, "```json\n{not json\n```")]
            continue
        wrong = (f"def {task.entry_point}(*args):\n    return None\n" if task.entry_point
                 else "print('no')\n")
        pairs += [(task, f"```python\n{ref}\n```"), (task, f"```python\n{wrong}```"),
                  (task, "```python\ndef broken(:\n    pass\n```"),
                  (task, f"```python\nimport os\nos._exit(0)\n{ref}\n```")]
    return pairs


async def _judged_directly(pairs: list[tuple]) -> list:
    attempts = [Attempt(attempt_id=f"direct.{i}", group_id="direct", index=i, group_size=len(pairs),
                        task=task, turns=[Turn(prompt_ids=b"", completion_ids=b"", logprobs=b"",
                                               completion=text, policy_version=0)],
                        policy_version=0) for i, (task, text) in enumerate(pairs)]
    backend = await open_backend(SANDBOX, 4)
    try:
        return await judge_all(attempts, backend, JudgeConfig(), concurrency=4)
    finally:
        await backend.aclose()


def test_trl_reward_equals_the_judges_reward(built_envs):  # noqa: F811
    """For the same completions, the TRL reward function returns exactly the judge's rewards."""
    pairs = _cases()
    with JudgeReward(JudgeConfig(), SANDBOX, concurrency=4) as reward:
        rewards = reward(prompts=[[{"role": "user", "content": t.prompt}] for t, _ in pairs],
                         completions=[[{"role": "assistant", "content": c}] for _, c in pairs],
                         task_json=[task_column(t) for t, _ in pairs], trainer_state=None)
    judged = anyio.run(_judged_directly, pairs)
    assert rewards == [j.judgement.reward for j in judged]
    assert {j.judgement.outcome for j in judged} == {"pass", "fail", "hack"}
    assert len(set(rewards)) >= 4  # pass, wrong, syntax error and hack are told apart
    assert reward.outcomes == {o: sum(j.judgement.outcome == o for j in judged)
                               for o in ("pass", "fail", "hack")}


def test_a_dropped_attempt_gets_no_reward(built_envs):  # noqa: F811
    """An infrastructure failure (a task with no test to count) is None for TRL, never a reward."""
    task = next(generate(registry.resolve("structured_output", EnvEntry()), 1, seed=12, levels=[0]))
    task = msgspec.structs.replace(task, verifier=msgspec.structs.replace(
        task.verifier, visible="", hidden=""))
    text = f"```json\n{task.verifier.reference}\n```"
    with JudgeReward(JudgeConfig(), SANDBOX) as reward:
        rewards = reward([task.prompt], [text], task_json=[task_column(task)])
        assert reward.last[0].judgement.outcome == "dropped"
    assert rewards == [None]


def test_a_completion_cut_at_the_token_limit_fails_unread_when_the_judge_says_so(built_envs):  # noqa: F811
    """With `[judge] truncated = "fail"` a completion of `max_new_tokens` ids that ends in
    neither EOS nor a stop string is the model's failure (`model.truncated`), as whetstone's
    own judge scores its generator's; the same text shorter than the limit, or ended by EOS,
    is judged on its text (a pass here); with "judged" the limit changes nothing."""
    task, text = next((t, c) for t, c in _cases() if c.endswith("```"))
    cut, short, eos = [5, 6, 7, 8], [5, 6, 7], [5, 6, 7, 0]
    judge = JudgeConfig(truncated="fail")
    with JudgeReward(judge, SANDBOX, max_new_tokens=4, stops=("\n```\n",), eos_id=0) as reward:
        reward([task.prompt] * 3, [text] * 3, task_json=[task_column(task)] * 3,
               completion_ids=[cut, short, eos])
        outcomes = [(j.judgement.outcome, j.judgement.cause) for j in reward.last]
    assert outcomes[0] == ("fail", "model.truncated")
    assert outcomes[1][0] == outcomes[2][0] == "pass", outcomes
    with JudgeReward(JudgeConfig(), SANDBOX, max_new_tokens=4, eos_id=0) as reward:
        reward([task.prompt], [text], task_json=[task_column(task)], completion_ids=[cut])
        assert reward.last[0].judgement.outcome == "pass"
