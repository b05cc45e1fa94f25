"""Why a supervisor stopped on an error, kept as one line that a full disk cannot cut.

Consumes the exception that ended a supervisor (or a line already made from one); produces
`<run dir>/supervisor.cause`, the exception's last line (`runtime.stack.crash_cause`
reads actor crashes the same way), and reads it back. The file's room is taken when the run
starts (`reserve`): written in place later, the line needs no new block on a full disk,
where a traceback written to `stack.out` is cut wherever the disk ran out. Nothing here
raises an `OSError`. It does not decide what to do about the stop.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path

from runtime.stack.crash_cause import last_line

ROOM = 16 * 1024
"Bytes reserved for the line; a longer one is cut there, with '…'."


def reserve(path: Path) -> bool:
    """Take ROOM bytes at `path` (blank: no cause yet); False when the disk refused them."""
    try:
        with open(path, "wb") as f:
            f.write(b"\n" * ROOM)
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        return False


def line_of(exc: BaseException) -> str:
    """The last line of `exc`'s traceback (the innermost exception of a group)."""
    return last_line("".join(traceback.format_exception(exc))) or repr(exc)


def record(path: Path, line: str) -> None:
    """Write `line` into the room `reserve` took (or a new file when none was taken)."""
    data = " ".join(line.split()).encode()
    if len(data) >= ROOM:
        data = data[:ROOM - 4].decode(errors="ignore").encode() + "…".encode()
    try:
        with open(path, "r+b" if path.exists() else "wb") as f:
            f.write(data + b"\n")
            f.truncate()
    except OSError:
        pass


def read(path: Path) -> str:
    """The recorded line, or '' (no file, or the room is still blank)."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def release(path: Path) -> None:
    """Remove a reservation that holds no cause (the stack stopped cleanly)."""
    if not read(path):
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass
