"""What the learner has already consumed, so nothing is trained twice.

Consumes verdict ids and group ids of every batch the learner took (trained or left out);
produces membership checks and the id lists saved inside each checkpoint, so that after a
crash a redelivered verdict whose update survived in the checkpoint is acked, not trained
again; it also tells which ids no checkpoint holds yet. Bounded: the oldest ids are forgotten
first (by then their messages were long acked).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable

LIMIT = 200_000


class Ledger:
    """Verdict and group ids consumed, oldest first, bounded by `limit`; and which ids no checkpoint holds yet."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self.verdicts: OrderedDict[str, None] = OrderedDict()
        self.groups: OrderedDict[str, None] = OrderedDict()
        self.unsaved: set[str] = set()
        "Verdict ids added since the last `mark_saved()`."

    def add(self, verdict_ids: Iterable[str], group_ids: Iterable[str]) -> list[str]:
        """Record a batch; returns the verdict ids that were recorded already (a sample
        consumed twice: the caller reports it)."""
        verdict_ids = list(verdict_ids)
        again = [i for i in verdict_ids if i in self.verdicts]
        self.unsaved.update(verdict_ids)
        for table, ids in ((self.verdicts, verdict_ids), (self.groups, group_ids)):
            for i in ids:
                table[i] = None
            while len(table) > self.limit:
                table.popitem(last=False)
        return again

    def mark_saved(self) -> None:
        """A checkpoint now holds everything recorded so far."""
        self.unsaved.clear()

    def saved(self, verdict_id: str) -> bool:
        """True if this verdict was consumed and a checkpoint holds that."""
        return verdict_id in self.verdicts and verdict_id not in self.unsaved

    @property
    def truncated(self) -> bool:
        """True once the oldest ids may have been forgotten."""
        return len(self.verdicts) >= self.limit

    def seen(self, verdict_id: str, group_id: str) -> bool:
        """True if this verdict, or the group it belongs to, was consumed already."""
        return verdict_id in self.verdicts or group_id in self.groups

    def consumed(self, verdict_id: str) -> bool:
        """True if this verdict itself was consumed (trained or left out)."""
        return verdict_id in self.verdicts

    def to_state(self) -> dict[str, list[str]]:
        """The ids to save: `consumed_verdicts` and `consumed_groups`, oldest first
        (fields of `policy.checkpoint.LearnerState`)."""
        return {"consumed_verdicts": list(self.verdicts), "consumed_groups": list(self.groups)}

    @classmethod
    def from_state(cls, verdict_ids: Iterable[str], group_ids: Iterable[str]) -> "Ledger":
        """A ledger holding the ids a checkpoint saved."""
        ledger = cls()
        ledger.add(verdict_ids, group_ids)
        return ledger
