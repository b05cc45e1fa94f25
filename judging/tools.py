"""The tool protocol of tool episodes: the catalog shown to the model, calls parsed from its
turns, and when an episode ends.

Consumes model completions and the task's episode budgets (`Verifier.extra`: `max_steps`,
`max_tokens`); produces `ToolCall`s (or the reason a turn holds none), the
text of a result message, and the end of an episode. The format is the one chat templates
use for tools: the assistant writes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
and the result comes back as a message of role `tool`. It runs no tool and trims no result
(the executor's `sandbox.session` does).
"""

from __future__ import annotations

import json
import re

from bus.messages import Task, ToolCall, ToolResult
from judging import kinds

TOOLS: dict[str, tuple[str, str]] = {
    "list_files": ("{}", "list the repository's files"),
    "read_file": ('{"path": "pkg/mod.py", "start": 1, "end": 80}',
                  "show lines start..end of a file (numbered; start and end optional)"),
    "write_file": ('{"path": "pkg/mod.py", "content": "..."}', "replace a file's whole content"),
    "replace": ('{"path": "pkg/mod.py", "old": "exact text", "new": "replacement"}',
                "replace one occurrence of `old` in a file"),
    "run_tests": ('{"test": "tests.test_x.TestX.test_y"}',
                  "run the visible tests (all of them, or the one named)"),
    "submit": ("{}", "finish: the repository is judged as it is now"),
}
"Each tool: an example of its arguments, and what it does."

_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)


def catalog() -> str:
    """The tool instructions for a prompt."""
    lines = ["Use one tool per message, written as",
             '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>',
             "Each result comes back as the next message. Tools:"]
    lines += [f"- {name} {example}: {what}" for name, (example, what) in TOOLS.items()]
    return "\n".join(lines)


def parse_call(completion: str) -> ToolCall | str:
    """The first tool call in a completion, or why there is none (shown to the model)."""
    found = _CALL.search(completion)
    if found is None:
        return "No tool call found. Write exactly one <tool_call>{...}</tool_call>."
    try:
        body = json.loads(found.group(1))
    except ValueError as exc:
        return f"The tool call is not valid JSON: {exc}"
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        return 'A tool call is a JSON object {"name": ..., "arguments": {...}}.'
    if body["name"] not in TOOLS:
        return f"Unknown tool {body['name']!r}; tools: {', '.join(TOOLS)}."
    arguments = body.get("arguments", {})
    if not isinstance(arguments, dict):
        return "`arguments` must be a JSON object."
    return ToolCall(name=body["name"], arguments=arguments)


def is_tool_task(task: Task) -> bool:
    """True for tasks attempted as tool episodes."""
    return kinds.of(task).turns == "tools"


def episode_over(task: Task, calls: list[ToolCall], tokens: int, sampled: bool = True) -> str:
    """Why the episode ends now ('submit', 'steps', 'tokens', or 'context' when the last turn
    could sample nothing: the context is full), or '' while it goes on."""
    if calls and calls[-1].name == "submit":
        return "submit"
    if not sampled:
        return "context"
    if len(calls) >= task.verifier.budget("max_steps", 16):
        return "steps"
    if tokens >= task.verifier.budget("max_tokens", 4096):
        return "tokens"
    return ""


def result_message(result: ToolResult) -> str:
    """The text of the tool message that answers a call."""
    return result.output if result.ok else f"error: {result.output}"
