"""Verdicts gathered into GRPO groups, and groups into learner batches.

Consumes verdicts (with an opaque handle each, the message delivery) as they arrive;
produces batches of whole groups. A group is ready once all `group_size` members arrived
(dropped verdicts count as arrived; they are missing only from the advantage) or once it
has waited `timeout_s` since its first member. A batch is taken when ready groups hold at
least `batch_size` counted members (all members, or with `counted` only those it counts:
members of groups with a signal, for refill), when they hold `most` members in all, or when
the oldest ready group has waited `timeout_s` (so the tail of a run is not held forever).
Groups stay whole: never split across batches.

Pure bookkeeping: it does no I/O and computes no advantages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from bus.messages import Verdict


@dataclass
class Group:
    """The members of one group that arrived so far."""

    group_id: str
    size: int
    first_at: float
    members: dict[str, tuple[Verdict, Any]] = field(default_factory=dict)
    "verdict id -> (verdict, handle)."
    extra_handles: list[Any] = field(default_factory=list)
    "Handles of repeated deliveries of a member already here; settled with the group."

    @property
    def complete(self) -> bool:
        return len(self.members) >= self.size

    def handles(self) -> list[Any]:
        return [h for _, h in self.members.values()] + self.extra_handles


class GroupBuffer:
    """Verdicts held by group until each group is complete or times out, then taken in batches."""

    def __init__(self, batch_size: int, timeout_s: float,
                 counted: Callable[[Group], int] | None = None, most: int = 0) -> None:
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.counted = counted or (lambda group: len(group.members))
        "Members of a group that count towards `batch_size` (default: all of them)."
        self.most = most
        "Most members a batch takes in all, counted or not (0: no bound)."
        self.groups: dict[str, Group] = {}

    def add(self, verdict: Verdict, handle: Any, now: float) -> None:
        """Hold `verdict` in its group."""
        attempt = verdict.attempt
        group = self.groups.get(attempt.group_id)
        if group is None:
            group = Group(attempt.group_id, max(1, attempt.group_size), now)
            self.groups[attempt.group_id] = group
        if verdict.verdict_id in group.members:
            group.extra_handles.append(handle)
        else:
            group.members[verdict.verdict_id] = (verdict, handle)

    def held(self) -> int:
        """Members held in all groups."""
        return sum(len(g.members) for g in self.groups.values())

    def _ready(self, now: float) -> list[Group]:
        ready = [g for g in self.groups.values()
                 if g.complete or now - g.first_at >= self.timeout_s]
        return sorted(ready, key=lambda g: g.first_at)

    def take_batch(self, now: float) -> list[Group] | None:
        """Whole ready groups (oldest first) until they hold `batch_size` counted members or
        `most` members in all, or None while the ready ones hold neither (and none timed out)."""
        ready = self._ready(now)
        if not ready:
            return None
        if not self._full(ready) and now - ready[0].first_at < self.timeout_s:
            return None
        batch: list[Group] = []
        for group in ready:
            if self._full(batch):
                break
            batch.append(group)
            del self.groups[group.group_id]
        return batch

    def _full(self, groups: list[Group]) -> bool:
        if sum(self.counted(g) for g in groups) >= self.batch_size:
            return True
        return bool(self.most) and sum(len(g.members) for g in groups) >= self.most

    def next_deadline(self) -> float | None:
        """When the oldest held group times out, if any group is held."""
        if not self.groups:
            return None
        return min(g.first_at for g in self.groups.values()) + self.timeout_s
