"""A tool episode in one process: an agent's turns, each tool call run in a session, the result
back as the next message, until submit or a budget; then the final workspace is judged.

Consumes an agent (an async function from the messages so far to its next completion: a
scripted agent in tests and benchmarks, a model elsewhere), a task and an open
`sandbox.session.Session`; produces an `EpisodeLog` and, through `judge_episode`, the
judge's `CheckOutcome` of the final workspace (hidden tests through the function harness,
tamper signs, the same path the judge actor uses). The bus-driven episode (judge actor and
executor sessions) takes each step with the same `call_of` and `session_calls`; this module
is its reference and its test bench. It does not sample from a model or publish anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from bus.messages import Task, ToolCall, ToolResult
from judging.tools import episode_over, parse_call, result_message
from judging.verify import CheckOutcome, check_code

Agent = Callable[[list[dict[str, str]]], Awaitable[str]]


@dataclass
class EpisodeLog:
    """What one tool episode did: its calls, their results, the messages, how it ended, its final workspace."""

    calls: list[ToolCall] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)
    end: str = ""
    "'submit', 'steps' or 'tokens'."
    files: dict[str, str] = field(default_factory=dict)
    "The workspace when the episode ended."
    refused: list[str] = field(default_factory=list)
    infra: str = ""
    "Set when the sandbox failed during the episode: no reward may come from it."

    def submission(self) -> str:
        """The final workspace as the judge reads it (`repo_io` candidate)."""
        return json.dumps({"files": self.files, "refused": self.refused})


def call_of(completion: str) -> tuple[ToolCall, ToolResult | None]:
    """The tool call in a completion, and no result yet; a malformed one is a nameless call
    answered at once with why (it never reaches the session)."""
    call = parse_call(completion)
    if isinstance(call, str):
        return ToolCall(name=""), ToolResult(name="", ok=False, output=call)
    return call, None


def session_calls(calls: list[ToolCall]) -> int:
    """Calls the session has run: malformed ones (name '') never reach it."""
    return sum(1 for call in calls if call.name)


async def run_episode(agent: Agent, task: Task, session, *,
                      count_tokens: Callable[[str], int] = lambda text: len(text.split())) -> EpisodeLog:
    """Drive one episode to its end; the session's workspace is removed after."""
    log = EpisodeLog(messages=[{"role": "user", "content": task.prompt}])
    tokens = 0
    try:
        while not log.end:
            completion = await agent(list(log.messages))
            tokens += count_tokens(completion)
            log.messages.append({"role": "assistant", "content": completion})
            call, result = call_of(completion)
            if result is None:
                result = await session.call(call, step=session_calls(log.calls))
            log.calls.append(call)
            log.results.append(result)
            if result.infra:
                log.infra, log.end = result.infra, "infra"
                break
            log.messages.append({"role": "tool", "content": result_message(result)})
            log.end = episode_over(task, log.calls, tokens)
        log.refused = list(session.workspace.refused)
    finally:
        log.files = session.close()
    return log


async def judge_episode(task: Task, log: EpisodeLog, backend) -> CheckOutcome | None:
    """The judgement of the final workspace; None when the episode failed for the sandbox's
    sake (infrastructure: dropped, never a reward)."""
    if log.infra:
        return None
    return await check_code(task, log.submission(), backend)


def scripted(completions: list[str]) -> Agent:
    """An agent that plays fixed completions in order (then submits)."""
    queue = list(completions)

    async def agent(messages: list[dict[str, str]]) -> str:
        return queue.pop(0) if queue else '<tool_call>{"name": "submit"}</tool_call>'
    return agent


def tool_text(name: str, **arguments) -> str:
    """A completion making one tool call, as a model would write it."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
