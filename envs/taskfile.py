"""Task files: JSON lines of `Task` records, read line by line so one bad line loses nothing else.

Consumes a path (or text); produces the tasks that decode, and one `InputError` per bad
line naming the file, the line and the field (`verifier.kind`, `prompt`, ...), or one at
line 0 for a file that cannot be read, is empty or is not text (`bus.jsonlines`). The tag
field `t` may be left out; a newer version of it is named as such. Writes tasks back as
JSON lines; reads lists of task ids (`[envs] train_ids`). It checks shape only; whether a
task is any good is `envs.gates`' business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable

import msgspec

from bus.errors import InputError
from bus.jsonlines import numbered_lines
from bus.messages import Task, tag_of

_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_DECODER = msgspec.json.Decoder(Task)
_TAG = tag_of(Task)
_TAG_STEM = _TAG.rstrip("0123456789")
"'whet.task.v': what every version's tag starts with."


@dataclass
class TaskFile:
    """What a task file held: the good tasks and an error per bad line."""

    tasks: list[Task] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)


def parse_line(line: str, source: str, line_no: int) -> Task:
    """One task from one JSON line; InputError naming the field if it does not fit."""
    try:
        raw = msgspec.json.decode(line)
    except msgspec.DecodeError as exc:
        raise InputError(source, line_no, "", f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise InputError(source, line_no, "", "expected a JSON object (one Task per line)")
    raw.setdefault("t", _TAG)
    if isinstance(raw["t"], str) and raw["t"].startswith(_TAG_STEM) and raw["t"] != _TAG:
        raise InputError(source, line_no, "t", f"{raw['t']!r} is a version this whetstone does not "
                         f"read (it reads {_TAG}); upgrade whetstone, or write it as {_TAG}")
    try:
        return msgspec.convert(raw, Task)
    except msgspec.ValidationError as exc:
        match = _AT.match(str(exc))
        assert match is not None
        path = (match["path"] or "").lstrip(".")
        what = match["what"]
        missing = re.match(r"Object missing required field `(.+)`", what)
        if missing:
            path, what = ".".join(filter(None, [path, missing[1]])), "required field missing"
        if path == "t":
            what = f"{what} (this file format is {_TAG})"
        raise InputError(source, line_no, path, what) from None


def read_text(text: str, source: str) -> TaskFile:
    """Every task in `text`; blank lines and lines starting with '#' are skipped."""
    return _read_lines(text.encode(), source)


def read(path: str | Path) -> TaskFile:
    """Every task in the file at `path`; a file that cannot be read, is empty or is not text
    is one error at line 0."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return TaskFile(errors=[InputError(str(path), 0, "", f"cannot read: {exc.strerror}")])
    return _read_lines(data, str(path))


def _read_lines(data: bytes, source: str) -> TaskFile:
    try:
        lines, too_long = numbered_lines(data, source)
    except InputError as exc:
        return TaskFile(errors=[exc])
    out = TaskFile(errors=too_long)
    seen: dict[str, int] = {}
    for line_no, line in lines:
        if line.lstrip().startswith("#"):
            continue
        try:
            task = parse_line(line, source, line_no)
        except InputError as exc:
            out.errors.append(exc)
            continue
        if task.task_id in seen:
            out.errors.append(InputError(source, line_no, "task_id",
                                         f"{task.task_id!r} repeats line {seen[task.task_id]}"))
            continue
        seen[task.task_id] = line_no
        out.tasks.append(task)
    return out


def read_ids(path: str | Path) -> dict[str, int]:
    """The task ids listed in the file at `path`, one a line (blank lines and lines starting
    with '#' skipped), each with its line number; InputError at line 0 if it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(str(path), 0, "", f"cannot read: {exc.strerror}") from None
    ids: dict[str, int] = {}
    for line_no, line in enumerate(text.splitlines(), start=1):
        if line.strip() and not line.lstrip().startswith("#"):
            ids.setdefault(line.strip(), line_no)
    return ids


def write(out: IO[str], tasks: Iterable[Task]) -> int:
    """Write `tasks` as JSON lines; returns how many."""
    n = 0
    for task in tasks:
        out.write(msgspec.json.encode(task).decode() + "\n")
        n += 1
    return n
