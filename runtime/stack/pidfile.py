"""Pid files that say whose they are, so a reused pid is never signalled.

Consumes a pid file's path and the run id it belongs to; produces the file (`write`: JSON
with the pid, the process's start time and the run id), what it names (`holder`: the live
process that wrote it, or why the file is stale) and a stop of that process (`stop`). The
start time is field 22 of /proc/<pid>/stat, in clock ticks since boot: a process that got
the same pid later has another. `stop` checks it again through a pidfd, so the process it
signals is the one it checked. It never signals a process whose identity does not match.
"""

from __future__ import annotations

import os
import select
import signal
from dataclasses import dataclass
from pathlib import Path

import msgspec


class PidRecord(msgspec.Struct, frozen=True):
    """What a pid file holds."""

    pid: int
    start: int
    "Start time of the process, clock ticks since boot (/proc/<pid>/stat field 22)."
    run_id: str


@dataclass(frozen=True)
class Holder:
    """What a pid file names: a live process (`record`), no file, or a stale file (`stale`)."""

    record: PidRecord | None = None
    "The process that wrote the file, running now; None when there is none."
    stale: str = ""
    "Why the file names no process of this run ('' when it does, or there is no file)."


def start_time(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot); None once it has exited
    (a zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[19])


def write(path: Path, run_id: str) -> None:
    """Write this process's pid file for `run_id` (atomically: a reader sees all or none)."""
    record = PidRecord(pid=os.getpid(), start=start_time(os.getpid()) or 0, run_id=run_id)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(msgspec.json.encode(record) + b"\n")
    os.replace(tmp, path)


def holder(path: Path, run_id: str) -> Holder:
    """The live process of run `run_id` that wrote `path`, or why the file is stale."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Holder()
    except OSError as exc:
        return Holder(stale=f"it cannot be read: {exc.strerror}")
    try:
        record = msgspec.json.decode(data, type=PidRecord)
    except msgspec.DecodeError:
        return Holder(stale=f"it does not say which process wrote it ({data[:40]!r})")
    if record.run_id != run_id:
        return Holder(stale=f"it was written for run {record.run_id!r}")
    now = start_time(record.pid)
    if now is None:
        return Holder(stale=f"pid {record.pid} is not running")
    if now != record.start:
        return Holder(stale=f"pid {record.pid} is another process now (it started later)")
    return Holder(record)


def stop(record: PidRecord, timeout_s: float) -> bool:
    """SIGTERM the process `record` names, if it is still that process; True once it is
    gone (or was already)."""
    try:
        fd = os.pidfd_open(record.pid)
    except ProcessLookupError:
        return True
    try:
        if start_time(record.pid) != record.start:  # the pid was taken again: not ours
            return True
        try:
            signal.pidfd_send_signal(fd, signal.SIGTERM)
        except ProcessLookupError:
            return True
        poller = select.poll()
        poller.register(fd, select.POLLIN)  # readable once the process has exited
        return bool(poller.poll(timeout_s * 1000))
    finally:
        os.close(fd)
