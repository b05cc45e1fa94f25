"""Parts of tool episodes: tool calls and their results, and per-step credit. The session
requests and replies that carry them are in `bus.messages.work`. No I/O.
"""

from __future__ import annotations

from typing import Any

from bus.messages.base import Part


# --- tool episodes ------------------------------------------------------------------------


class ToolCall(Part):
    """One tool call the model made in a turn (parsed by the judge from its completion)."""

    name: str
    "Tool name: list_files, read_file, write_file, replace, run_tests or submit."
    arguments: dict[str, Any] = {}
    "The call's arguments, as the model wrote them (JSON values)."


class ToolResult(Part):
    """What one tool call did, as the episode's owner reports it."""

    name: str
    "The tool that ran ('' when the call could not be parsed)."
    ok: bool
    "False when the call was refused or failed (the output says why)."
    output: str = ""
    "Text returned to the model as the next message, trimmed to the episode's budget."
    visible_passed: int = -1
    "Visible tests passing after this call, when it ran them (-1 otherwise)."
    visible_total: int = -1
    "Visible tests run by this call (-1 when it ran none)."
    refused: bool = False
    "True when the call tried to write outside the workspace (a hack sign)."
    infra: str = ""
    "Set when the sandbox itself failed while running the call (never the model's fault)."
    passing: int = -1
    """Visible tests passing in the workspace after this call: this call's run of all of them,
    or a run made after a call that changed the workspace (not shown to the model), or carried
    from the call before; -1 when unknown."""
    digest: str = ""
    "Content hash of the workspace after this call (`sandbox.workspace.digest_of`)."


class StepCredit(Part):
    """One step of a tool episode, for per-step credit (`policy.credit`): recorded by the judge
    on the attempt, read by the learner with `[learner] credit = "step"`."""

    turn: int
    "The turn whose completion made this step's tool call."
    state: str
    "Content hash of the workspace when the step began: steps from equal states share a baseline."
    reward: float = 0.0
    "Change in visible tests passing over the step, as a share of the visible tests (0 if unknown)."
    passing: int = -1
    "Visible tests passing after the step (-1 if unknown)."
    total: int = -1
    "Visible tests in the suite (-1 if unknown)."
    next_state: str = ""
    "Content hash of the workspace after the step."
    start: int = 0
    "First token of the step's completion in the trajectory (every turn's prompt ids, then completion ids)."
    end: int = 0
    "One past its last token."
