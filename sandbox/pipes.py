"""A job's output channels: made (`pipe`), then read non-blocking, capped, stoppable.

Consumes raw file descriptors (stdout, stderr, the report channel, bwrap's status pipe);
produces the bytes read, up to a cap, and calls back once when the cap is passed so the
caller can stop the job (`output_limit`). Every backend reads through here, so a stdout
flood is handled the same way everywhere. It does NOT time out on its own: callers wrap it
in their deadline and close what is left with `close_quietly`.
"""

from __future__ import annotations

import fcntl
import os
from typing import Callable

import anyio
from anyio import wait_readable

_CHUNK = 65536


def _high_fd(fd: int) -> int:
    """Move `fd` to 10 or above, so the launcher's `exec 3>&N` can never clobber it."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def pipe() -> tuple[int, int]:
    """A close-on-exec pipe (read end, write end), both ends at fd 10 or above."""
    r, w = os.pipe2(os.O_CLOEXEC)
    return _high_fd(r), _high_fd(w)


class CappedReader:
    """Reads one fd until EOF, keeping at most `cap` bytes."""

    def __init__(self, fd: int, cap: int, on_overflow: Callable[[], None] | None = None,
                 wait_first: bool = False) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.cap = cap
        self.data = bytearray()
        self.overflowed = False
        self._on_overflow = on_overflow
        # A FIFO nobody has opened for writing yet reads as EOF, but polls as not ready until
        # a writer came and went: waiting first turns "no writer yet" into "not yet".
        self._wait_first = wait_first
        self.eof = anyio.Event()
        self.line = anyio.Event()
        "Set once a newline has been read (status channels end with one)."

    async def run(self) -> None:
        """Read until EOF (every writer gone), or until cancelled."""
        try:
            await self._read()
        finally:
            self.eof.set()

    async def _read(self) -> None:
        if self._wait_first:
            await wait_readable(self.fd)
        while True:
            try:
                chunk = os.read(self.fd, _CHUNK)
            except BlockingIOError:
                await wait_readable(self.fd)
                continue
            except OSError:
                return
            if not chunk:
                return
            room = self.cap - len(self.data)
            if len(chunk) > room:
                self.data.extend(chunk[:max(room, 0)])
                if not self.overflowed:
                    self.overflowed = True
                    if self._on_overflow:
                        self._on_overflow()
            else:
                self.data.extend(chunk)
            if b"\n" in chunk:
                self.line.set()

    def text(self) -> str:
        return bytes(self.data).decode(errors="replace")


async def read_all(readers: list[CappedReader], deadline_s: float) -> bool:
    """Run every reader until EOF or `deadline_s`; True when all reached EOF in time."""
    with anyio.move_on_after(deadline_s) as scope:
        async with anyio.create_task_group() as tg:
            for reader in readers:
                tg.start_soon(reader.run)
    return not scope.cancelled_caught


def close_quietly(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
