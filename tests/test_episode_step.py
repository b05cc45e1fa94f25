"""The one tool-episode step (`judging.episode.step`): what a turn means and when it ends."""

from __future__ import annotations

import msgspec
import pytest

from bus.messages import Task, ToolCall, ToolResult
from envs.environment import generate
from envs.repository import ENVIRONMENT
from judging.episode import settle, step, tool_text

pytestmark = pytest.mark.unit


def _task(**budgets: str) -> Task:
    [task] = generate(ENVIRONMENT, 1, seed=5)
    extra = {**task.verifier.extra, **budgets}
    return msgspec.structs.replace(task, verifier=msgspec.structs.replace(task.verifier, extra=extra))


class Session:
    """Answers each call with a fixed result and records what it was asked (its step index too)."""

    def __init__(self, result: ToolResult | None = None) -> None:
        self.asked: list[tuple[str, int]] = []
        self.result = result

    async def __call__(self, call: ToolCall, n: int) -> ToolResult | None:
        self.asked.append((call.name, n))
        return self.result if self.result is not None or call.name == "" else None


OK = ToolResult(name="list_files", ok=True, output="pkg/a.py")


async def test_a_malformed_call_is_answered_at_once_and_never_reaches_the_session():
    """No tool call: a nameless call, the reason as the message, the session untouched."""
    session = Session(OK)
    done = await step(_task(), [], "I would read the file first.", 10, True, session)
    assert session.asked == [] and done.call.name == "" and not done.ran
    assert done.end == "" and done.message.startswith("error: No tool call found")


async def test_a_well_formed_call_runs_with_its_session_step_index():
    """The step index counts only calls the session ran, so a repeated request is idempotent."""
    session = Session(OK)
    calls = [ToolCall(name="list_files"), ToolCall(name=""), ToolCall(name="read_file")]
    done = await step(_task(), calls, tool_text("list_files"), 10, True, session)
    assert session.asked == [("list_files", 2)]
    assert done.ran and done.end == "" and done.message == "pkg/a.py"


async def test_submit_ends_the_episode_even_past_every_budget():
    """Submit is 'submit', whatever the step and token counts."""
    session = Session(ToolResult(name="submit", ok=True, output="submitted"))
    done = await step(_task(max_steps="1", max_tokens="1"), [ToolCall(name="list_files")] * 3,
                      tool_text("submit"), 10_000, True, session)
    assert done.end == "submit"


async def test_the_step_and_token_budgets_end_the_episode():
    """The max_steps-th call ends it as 'steps'; reaching max_tokens ends it as 'tokens'."""
    task = _task(max_steps="3", max_tokens="100")
    two = [ToolCall(name="list_files")] * 2
    assert (await step(task, two[:1], tool_text("list_files"), 10, True, Session(OK))).end == ""
    assert (await step(task, two, tool_text("list_files"), 10, True, Session(OK))).end == "steps"
    assert (await step(task, [], "no call", 100, True, Session(OK))).end == "tokens"
    assert (await step(task, [], "", 10, False, Session(OK))).end == "context"


async def test_a_sandbox_failure_ends_the_episode_as_infra():
    """A result with `infra` set is 'infra' (dropped, never a reward), even for a submit."""
    broken = ToolResult(name="run_tests", ok=False, output="the sandbox failed", infra="oom")
    done = await step(_task(), [], tool_text("run_tests"), 10, True, Session(broken))
    assert done.end == "infra" and done.result.infra == "oom"


async def test_a_session_that_never_answers_gives_none():
    """No answer from the session: None, for the driver to drop the episode."""
    assert await step(_task(), [], tool_text("list_files"), 10, True, Session(None)) is None


def test_an_empty_result_still_sends_a_message():
    """A continuation needs feedback: an empty output is sent as '(no output)'."""
    empty = ToolResult(name="list_files", ok=True, output="")
    assert settle(_task(), [], ToolCall(name="list_files"), empty, 1).message == "(no output)"
