"""Where the cores go: CPU seconds of each actor kind's process trees, read from /proc.

Consumes process ids by label (each actor kind's instances, the nats-server); produces CPU
seconds per label, each summed over the whole process tree under its pids (sandboxes under
an executor's zygote, DeepSpeed ranks under the learner, their reaped children included),
and for the stack as a whole. Processes that already exited count only through the parent
that reaped them. It changes nothing and knows no bus.
"""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def process_table(proc: Path = Path("/proc")) -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds of the process and its reaped children)."""
    table: dict[int, tuple[int, float]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        # After the command: state ppid ... utime(11) stime cutime cstime (0-based from state).
        table[int(entry.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / TICK)
    return table


def tree_cpu(roots: list[int], table: dict[int, tuple[int, float]]) -> float:
    """CPU seconds of `roots` and every live descendant."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, todo, seen = 0.0, [p for p in roots if p in table], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += table[pid][1]
        todo += children.get(pid, [])
    return total


def cpu_by_label(pids: dict[str, list[int]], table: dict[int, tuple[int, float]] | None = None
                 ) -> dict[str, float]:
    """CPU seconds of each label's process trees."""
    table = process_table() if table is None else table
    return {label: round(tree_cpu(roots, table), 1) for label, roots in pids.items()}


def stack_cpu_seconds(pids: list[int]) -> float:
    """CPU seconds used by this process, its reaped children and the process trees of the
    live `pids` (sandboxes, DeepSpeed ranks)."""
    own = os.times()
    total = own.user + own.system + own.children_user + own.children_system
    return round(total + tree_cpu(pids, process_table()), 1)
