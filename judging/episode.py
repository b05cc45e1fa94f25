"""The tool-episode loop, once: what a turn's completion means, when the episode is over, and
what goes back; and its in-process driver.

Consumes a task, the calls so far, a completion, the tokens sampled so far and a way to run a
call in the episode's session; produces a `Next` (the call, its result, the episode's end or
'' while it goes on, and the tool message that answers the turn). `step` is that loop's one
turn: the judge actor (one step per bus message, the session on an executor), `run_episode`
(an agent and an open `sandbox.session.Session` in this process: tests, benchmarks, demos) and
`whet eval` on tool domains all take it. `judge_episode` judges a final workspace as the judge
does. It does not sample from a model or publish anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Awaitable, Callable, NamedTuple

from bus.messages import Task, ToolCall, ToolResult
from judging.tools import episode_over, parse_call, result_message
from judging.verify import CheckOutcome, check_code

Agent = Callable[[list[dict[str, str]]], Awaitable[str]]
RunCall = Callable[[ToolCall, int], Awaitable["ToolResult | None"]]
"Runs a call in the episode's session (the call, the session calls before it); None: no answer."


class Next(NamedTuple):
    """What one tool turn led to."""

    call: ToolCall
    "The turn's call (name '' when the completion held no well-formed call)."
    result: ToolResult
    "Its result: the session's, or the reason a malformed call was answered at once."
    end: str
    "Why the episode ends now ('submit', 'steps', 'tokens', 'context', 'infra'), or ''."
    message: str
    "The tool message answering the turn (the next turn's context while `end` is '')."

    @property
    def ran(self) -> bool:
        """True when the session ran the call (a malformed call never reaches it)."""
        return bool(self.call.name)


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


def settle(task: Task, calls: list[ToolCall], call: ToolCall, result: ToolResult, tokens: int,
           sampled: bool = True) -> Next:
    """The turn that made `call` (after `calls`) and got `result`: how the episode goes on.
    A sandbox failure under the session ends it as 'infra' (no reward may come from it)."""
    message = result_message(result) or "(no output)"
    if result.infra:
        return Next(call, result, "infra", message)
    return Next(call, result, episode_over(task, [*calls, call], tokens, sampled), message)


async def step(task: Task, calls: list[ToolCall], completion: str, tokens: int, sampled: bool,
               run: RunCall) -> Next | None:
    """One turn of a tool episode: the completion's call, run in the session through `run`
    (a malformed one answered at once), and what follows; None when the session never
    answered (`run` gave None). `tokens` counts every completion token so far, this one's too;
    `sampled` is False when this turn could sample nothing (a full context)."""
    call, result = call_of(completion)
    if result is None:
        result = await run(call, session_calls(calls))
        if result is None:
            return None
    return settle(task, calls, call, result, tokens, sampled)


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


async def run_episode(agent: Agent, task: Task, session, *,
                      count_tokens: Callable[[str], int] = lambda text: len(text.split())) -> EpisodeLog:
    """Drive one episode to its end (`step` each turn); the session's workspace is removed after."""
    log = EpisodeLog(messages=[{"role": "user", "content": task.prompt}])
    tokens = 0
    try:
        while not log.end:
            completion = await agent(list(log.messages))
            tokens += count_tokens(completion)
            log.messages.append({"role": "assistant", "content": completion})
            done = await step(task, log.calls, completion, tokens, True,
                              lambda call, n: session.call(call, step=n))
            assert done is not None  # an in-process session always answers
            log.calls.append(done.call)
            log.results.append(done.result)
            log.end = done.end
            if done.end == "infra":
                log.infra = done.result.infra
                break
            log.messages.append({"role": "tool", "content": done.message})
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
