"""The clocks of bench/vs_trl/: one command in a child process, timed the same way for each side.

Consumes a command line (the TRL side, `whet up`, one held-out evaluation); produces its
exit status, wall seconds from just before it starts to its exit, and CPU seconds from the
kernel's own count at its exit (`os.wait4`: the process and every descendant it reaped,
imports included). A sandboxed job runs in a cgroup of its own and shows in no process's
count: each side reports those seconds itself and the bench adds them. `meter()` and
`age()` are the same clocks read inside a running process (CPU of it, its reaped and its
live children; wall seconds since it started), for the clocks a side keeps while it runs.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime.stack.cpu import TICK, process_table, tree_cpu


@dataclass(frozen=True)
class ChildRun:
    """One command's exit status and clocks."""

    returncode: int
    wall_s: float
    "From just before the process starts to its exit."
    cpu_s: float
    "User and system CPU of the process and the descendants it reaped (`os.wait4`)."

    def clocks(self) -> dict[str, float]:
        """Wall and CPU seconds as a plain dict."""
        return {k: v for k, v in asdict(self).items() if k != "returncode"}


def run_timed(argv: list[str], log: Path, *, cwd: Path, env: dict[str, str]) -> ChildRun:
    """Run `argv` to its end with stdout and stderr in `log`; its status and clocks."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        began = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    return ChildRun(proc.returncode, round(wall, 1), round(usage.ru_utime + usage.ru_stime, 1))


def meter() -> float:
    """CPU seconds of this process since it started, its reaped children and its live
    descendants (the stack's meter, `runtime.stack.cpu`)."""
    return round(tree_cpu([os.getpid()], process_table()), 2)


def age() -> float:
    """Wall seconds since this process started (from /proc: before its first import)."""
    started = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]) / TICK
    return round(float(Path("/proc/uptime").read_text().split()[0]) - started, 2)
