"""Per-step credit of a tool episode, as the judge records it: one `StepCredit` per turn.

Consumes the attempt so far (its turns, and the steps already recorded), the state the step
started from (the session's opening for the first step, the previous step's end after) and
the step's `ToolResult` (None for a turn without a well-formed call, which changes nothing);
produces the step's `StepCredit`: the workspace hash it started from and ended at, the
visible tests passing after it, its reward (the change in visible tests passing, as a share
of the suite: +0.25 when a step makes one more of four tests pass) and the span of its
completion tokens in the trajectory the learner builds (`policy.batch.trajectory`: every
turn's prompt ids, then its completion ids). Pure: it runs nothing and computes no advantage
(`policy.credit` does).
"""

from __future__ import annotations

from typing import NamedTuple

from bus.messages import Attempt, SessionReply, StepCredit, ToolResult


class StepStart(NamedTuple):
    """Where a tool step started: the workspace's hash and its visible tests passing."""

    state: str
    "Content hash of the workspace."
    passing: int
    "Visible tests passing (-1 if unknown)."
    total: int
    "Visible tests in the suite (-1 if unknown)."


def start_of(attempt: Attempt, opened: SessionReply | None = None) -> StepStart:
    """Where the attempt's next step starts: the last step's end, or the session as opened."""
    if attempt.steps:
        last = attempt.steps[-1]
        return StepStart(last.next_state, last.passing, last.total)
    if opened is not None:
        return StepStart(opened.digest, opened.visible_passed, opened.visible_total)
    return StepStart("", -1, -1)


def token_span(attempt: Attempt, turn: int) -> tuple[int, int]:
    """[start, end) of turn `turn`'s completion tokens in the attempt's trajectory."""
    before = sum((len(t.prompt_ids) + len(t.completion_ids)) // 4 for t in attempt.turns[:turn])
    start = before + len(attempt.turns[turn].prompt_ids) // 4
    return start, start + len(attempt.turns[turn].completion_ids) // 4


def step_credit(attempt: Attempt, start: StepStart, result: ToolResult | None) -> StepCredit:
    """The credit of the attempt's newest turn, which made the call that gave `result`."""
    turn = len(attempt.turns) - 1
    if result is None or not result.digest:  # nothing ran: the workspace is as it was
        after, passing = start.state, start.passing
    else:
        after, passing = result.digest, result.passing
    known = start.passing >= 0 and passing >= 0 and start.total > 0
    reward = (passing - start.passing) / start.total if known else 0.0
    first, last = token_span(attempt, turn)
    return StepCredit(turn=turn, state=start.state, reward=round(reward, 6), passing=passing,
                      total=start.total, next_state=after, start=first, end=last)
