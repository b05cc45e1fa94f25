"""Per-step credit: step advantages against hand-computed values, the token advantages the
learner trains with, and the visible-test counts a real session reports after each step."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bus.messages import Attempt, SessionReply, StepCredit, ToolResult, Verdict
from judging.episode import tool_text
from judging.steps import StepStart, start_of, step_credit, token_span
from judging.tools import parse_call
from policy.batch import assemble, collate
from policy.credit import step_advantages, token_advantages
from policy.groups import GroupBuffer
from policy.objective import clipped_surrogate
from sandbox.session import open_session
from sandbox.workspace import digest_of
from tests.support.sandbox_fixtures import built_envs  # noqa: F401
from tests.test_batch import turn
from tests.test_generator import make_task
from tests.test_repository import _fix_script, _tasks, local  # noqa: F401


@pytest.mark.unit
def test_first_steps_from_the_same_workspace_share_a_baseline():
    """Two attempts start from S0: +0.5 and 0 become +0.25 and -0.25 (unscaled), +-1 scaled."""
    attempts = [[("S0", 0.5)], [("S0", 0.0)]]
    assert step_advantages(attempts, scale=False) == [[0.25], [-0.25]]
    assert step_advantages(attempts, scale=True) == [[pytest.approx(1.0, abs=1e-4)],
                                                     [pytest.approx(-1.0, abs=1e-4)]]


@pytest.mark.unit
def test_steps_are_pooled_by_start_state_across_and_within_attempts():
    """A: S0 +0, S0 +0.5, S1 +0.25; B: S0 +0, S2 -0.25; C dropped. Pool S0 = (0, 0.5, 0) has
    mean 1/6; S1 and S2 stand alone (no baseline: 0); C stays None."""
    attempts = [[("S0", 0.0), ("S0", 0.5), ("S1", 0.25)], [("S0", 0.0), ("S2", -0.25)], None]
    plain = step_advantages(attempts, scale=False)
    assert plain[0] == pytest.approx([-1 / 6, 1 / 3, 0.0])
    assert plain[1] == pytest.approx([-1 / 6, 0.0]) and plain[2] is None
    std = math.sqrt(((1 / 6) ** 2 * 2 + (1 / 3) ** 2) / 3)
    scaled = step_advantages(attempts, scale=True)
    assert scaled[0] == pytest.approx([-1 / 6 / std, 1 / 3 / std, 0.0], abs=1e-4)


@pytest.mark.unit
def test_token_advantages_add_each_steps_advantage_inside_its_span():
    """Trajectory advantage 0.5 everywhere; steps [2, 4) +1 and [6, 12) -1 at weight 0.5,
    the second cut at the trajectory's 10 tokens."""
    out = token_advantages(10, 0.5, [(2, 4), (6, 12)], [1.0, -1.0], weight=0.5)
    assert out.tolist() == [0.5, 0.5, 1.0, 1.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0]


def _attempt(turns, steps=(), index=0) -> Attempt:
    return Attempt(attempt_id=f"g.{index}", group_id="g", index=index, group_size=2,
                   task=make_task(), turns=list(turns), policy_version=0, steps=list(steps))


@pytest.mark.unit
def test_step_credit_is_the_change_in_visible_tests_passing_with_its_token_span():
    """Turns [p p | c c c] [p | c c]: the second step's tokens are 6..8; 2 -> 3 of 4 is +0.25;
    a turn without a call changes nothing."""
    turns = [turn([1, 2], [3, 4, 5]), turn([6], [7, 8])]
    assert token_span(_attempt(turns), 0) == (2, 5) and token_span(_attempt(turns), 1) == (6, 8)
    first = step_credit(_attempt(turns[:1]), StepStart("S0", 2, 4),
                        ToolResult(name="read_file", ok=True, passing=2, digest="S0"))
    assert (first.state, first.next_state, first.reward, first.start, first.end) == ("S0", "S0", 0.0, 2, 5)
    second = step_credit(_attempt(turns, [first]), start_of(_attempt(turns, [first])),
                         ToolResult(name="write_file", ok=True, passing=3, digest="S1"))
    assert (second.state, second.next_state, second.reward, second.passing) == ("S0", "S1", 0.25, 3)
    assert (second.start, second.end) == (6, 8)
    malformed = step_credit(_attempt(turns, [first]), StepStart("S1", 3, 4), None)
    assert (malformed.state, malformed.next_state, malformed.reward) == ("S1", "S1", 0.0)
    opened = SessionReply(session_id="g.0", executor="e", digest="S0", visible_passed=1, visible_total=4)
    assert start_of(_attempt(turns), opened) == StepStart("S0", 1, 4)
    unknown = step_credit(_attempt(turns[:1]), StepStart("S0", -1, 4),
                          ToolResult(name="write_file", ok=True, passing=3, digest="S1"))
    assert unknown.reward == 0.0


def _verdict(index: int, reward: float, step_rewards: list[float]) -> Verdict:
    """Two tool turns, [p p | c c] [p | c c c], both steps starting from state S0."""
    turns = [turn([1, 2], [3, 4]), turn([5], [6, 7, 8])]
    steps = [StepCredit(turn=0, state="S0", reward=step_rewards[0], next_state="S0", start=2, end=4),
             StepCredit(turn=1, state="S0", reward=step_rewards[1], next_state="S1", start=5, end=8)]
    attempt = _attempt(turns, steps, index)
    return Verdict(verdict_id=attempt.attempt_id, attempt=attempt, outcome="fail", reward=reward)


@pytest.mark.unit
def test_learner_token_weights_follow_the_step_advantages():
    """Group of two with rewards 1 and 0 (trajectory advantages +-1 unscaled /2: +0.5, -0.5)
    and step rewards (0, 0.5) and (0, 0): pool S0 = (0, 0.5, 0, 0), mean 0.125. Collated per
    token, the second attempt's steps shift its tokens by -0.125 each, the first's second step
    by +0.375; the surrogate's gradient at ratio 1 is -advantage, token by token."""
    def batch(credit: str):
        buf = GroupBuffer(batch_size=2, timeout_s=60)
        buf.add(_verdict(0, 1.0, [0.0, 0.5]), None, 0.0)
        buf.add(_verdict(1, 0.0, [0.0, 0.0]), None, 0.0)
        return assemble(buf.take_batch(0.0), version=0, max_staleness=0, scale=False,
                        max_len=100, credit=credit, step_weight=1.0)

    step = batch("step")
    rows = collate(sorted(step.samples, key=lambda s: s.verdict_id), pad_id=0)
    first = [0.5, 0.5, 0.375, 0.375, 0.5, 0.875, 0.875, 0.875]   # per token of [p p c c p c c c]
    second = [-0.5, -0.5, -0.625, -0.625, -0.5, -0.625, -0.625, -0.625]
    assert rows["advantages"].tolist() == [pytest.approx(first[1:]), pytest.approx(second[1:])]
    flat = collate(sorted(batch("trajectory").samples, key=lambda s: s.verdict_id), pad_id=0)
    assert flat["advantages"].tolist() == [[0.5] * 7, [-0.5] * 7]

    adv = torch.from_numpy(rows["advantages"])
    logp = torch.zeros_like(adv, requires_grad=True)
    loss, _ = clipped_surrogate(logp, logp.detach(), torch.zeros_like(adv), adv, "truncated",
                                clip_eps=0.2, cap=2.0)
    (loss * torch.from_numpy(rows["mask"])).sum().backward()
    expected = -adv * torch.from_numpy(rows["mask"])
    assert torch.allclose(logp.grad, expected)
    assert np.count_nonzero(rows["mask"]) == 10


@pytest.mark.unit
def test_a_group_with_equal_rewards_still_trains_on_its_steps_with_step_credit():
    """Both attempts failed alike (no trajectory signal) but one step helped: with step credit
    both are trained; with trajectory credit both are left out as without signal."""
    def batch(credit: str):
        buf = GroupBuffer(batch_size=2, timeout_s=60)
        buf.add(_verdict(0, 0.5, [0.0, 0.5]), None, 0.0)
        buf.add(_verdict(1, 0.5, [0.0, 0.0]), None, 0.0)
        return assemble(buf.take_batch(0.0), version=0, max_staleness=0, scale=True,
                        max_len=100, credit=credit)
    assert len(batch("step").samples) == 2
    assert batch("trajectory").no_signal == 2


@pytest.mark.bus
async def test_session_reports_visible_passing_and_workspace_hash_after_every_call(local):  # noqa: F811
    """A read keeps the hash and count; writing the fix is followed by a silent suite run (all
    visible tests pass, no run_tests called); one named test run carries the count."""
    backend, cache = local
    task = _tasks(1)[0]
    session = await open_session(cache, backend, task)
    start = session.workspace.prepared["visible_passed"]
    assert session.opened == digest_of(dict(task.files)) and start < 4
    read = await session.call(parse_call(tool_text("list_files")), step=0)
    assert (read.passing, read.digest) == (start, session.opened)
    writes = [await session.call(parse_call(text), step=i + 1)
              for i, text in enumerate(_fix_script(task)[3:-2])]
    assert writes[-1].passing == 4 and writes[-1].digest != session.opened
    test_id = next(p for p in task.files if p.startswith("tests/test_"))[:-3].replace("/", ".")
    one = await session.call(parse_call(tool_text("run_tests", test=test_id)), step=len(writes) + 1)
    assert one.ok and one.passing == 4 and one.digest == writes[-1].digest
    session.close()
