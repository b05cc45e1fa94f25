"""The review folder of a run: people's labels and the model judge's opinions, kept on disk.

Consumes a run folder; produces and reads `<run>/review/labels.jsonl` (`Label`s) and
`<run>/review/model_judge.jsonl` (`Opinion`s), append-only JSON lines. Each record is one
`write` of a whole line followed by an fsync, so a record is there after a crash or not at
all; a last line cut short by a crash is ignored on reading, any other bad line is an error
naming the file and line. It decides nothing about what the records mean.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

import msgspec

from bus.errors import WhetError

T = TypeVar("T")

LABELS = "labels.jsonl"
OPINIONS = "model_judge.jsonl"
THRESHOLD = "model_judge_threshold.json"


def folder(run_path: Path) -> Path:
    """`<run>/review`, created when missing."""
    path = Path(run_path) / "review"
    path.mkdir(parents=True, exist_ok=True)
    return path


def append(path: Path, record: msgspec.Struct) -> None:
    """Append one record as one line, durably."""
    line = msgspec.json.encode(record) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: Path, kind: type[T]) -> list[T]:
    """Every record in `path` (none when it does not exist), in the order written."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(msgspec.json.decode(line, type=kind))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            if number == len(lines):  # no newline after it: a write cut short
                break
            raise WhetError(f"{path}:{number}: not a {kind.__name__} record ({exc}); "
                            "fix or delete that line") from None
    return out
