"""A fixed set of numbered slots handed to concurrent jobs, oldest-freed first.

Consumes nothing; produces slot indices. A slot is a job's place on a backend: its uid
(`uid_base + index`), its cgroup, its folder, its warm sandbox or container. A slot that
could not be cleaned is kept out of rotation (`retire`). It does NOT know what a slot holds.
"""

from __future__ import annotations

import anyio


class SlotPool:
    """A backend's sandbox slots: taken one job at a time, given back, or retired."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.free = list(range(count))
        self.retired: set[int] = set()
        self._changed = anyio.Condition()

    async def take(self) -> int:
        """Wait for a free slot; the one freed longest ago (its warm sandbox is readiest)."""
        async with self._changed:
            while not self.free:
                await self._changed.wait()
            return self.free.pop(0)

    async def give(self, index: int) -> None:
        async with self._changed:
            self.free.append(index)
            self._changed.notify()

    def retire(self, index: int) -> None:
        """Keep a slot that could not be cleaned out of rotation for good."""
        self.retired.add(index)
