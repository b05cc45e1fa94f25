"""The console of a `whet` process: log lines above one live status line, on stderr.

Consumes rendered log lines (structlog writes them through `LineWriter`) and status text
(`runtime.stack.progress` sets it); produces them on stderr. On a terminal the status line stays
at the bottom, redrawn in place, and log lines scroll above it; elsewhere (a pipe, a file)
each status is a plain line of its own, written as often as the caller decides.

Writing never raises: once stderr is gone (the reader of `whet up | tee` died with Ctrl-C,
the terminal hung up) output stops quietly, so no stop path is cut short by a log call.
It decides nothing about what to show.
"""

from __future__ import annotations

import sys
from typing import TextIO

_CLEAR = "\r\x1b[2K"


class Terminal:
    """stderr with one status line kept under the log lines (on a terminal)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        try:
            self.tty = self.stream.isatty()
        except (OSError, ValueError):
            self.tty = False
        self.status = ""
        self.closed = False
        "True once a write failed: nobody reads any more."

    def line(self, text: str) -> None:
        """Write one log line (above the status line, on a terminal)."""
        if self.tty and self.status:
            self._write(f"{_CLEAR}{text}\n{self.status}")
        else:
            self._write(text + "\n")

    def show(self, status: str) -> None:
        """Set the status line: redrawn in place on a terminal, a plain line otherwise."""
        if self.tty:
            self.status = status
            self._write(_CLEAR + status)
        else:
            self._write(status + "\n")

    def end_status(self) -> None:
        """Leave the last status line where it is and go on below it."""
        if self.tty and self.status:
            self._write("\n")
        self.status = ""

    def _write(self, text: str) -> None:
        if self.closed:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # EPIPE, EIO after a hang-up, or a closed file
            self.closed = True


class LineWriter:
    """A file for structlog's WriteLogger: whole lines go to `Terminal.line`."""

    def __init__(self, terminal: Terminal) -> None:
        self.terminal = terminal
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            self.terminal.line(line)
        return len(text)

    def flush(self) -> None:
        pass


_terminal: Terminal | None = None


def terminal() -> Terminal:
    """This process's console (created on first use, on the stderr of that moment)."""
    global _terminal
    if _terminal is None or _terminal.stream is not sys.stderr:
        _terminal = Terminal(sys.stderr)
    return _terminal
