"""Staleness admission, as AReaL does it: admit work only while it can still be trained on.

Pure functions. With v the learner's steps (batches consumed; the policy version, as long
as the learner never restarted from an older checkpoint), staleness bound s and batch size
B, the attempts admitted so far and still useful must satisfy

    in_flight + produced <= (v + s + 1) * B

where `produced` counts trainable samples delivered to the learner and `in_flight` counts
attempts admitted but not yet judged. Attempts judged but not trainable (infrastructure
drops) leave `in_flight` without joining `produced`, so they free their budget instead of
stalling the learner. Eval work is outside this budget.
"""

from __future__ import annotations

from dataclasses import dataclass


def staleness_capacity(version: int, max_staleness: int, batch_size: int) -> int:
    """Attempts that may have been admitted in all, at `version`: (v + s + 1) * B."""
    return (max(version, 0) + max_staleness + 1) * batch_size


def admissible_attempts(*, in_flight: int, produced: int, version: int, max_staleness: int,
                        batch_size: int) -> int:
    """How many more attempts the staleness bound allows now (never negative)."""
    room = staleness_capacity(version, max_staleness, batch_size) - (in_flight + produced)
    return max(room, 0)


def admissible_groups(*, in_flight: int, produced: int, version: int, max_staleness: int,
                      batch_size: int, group_size: int) -> int:
    """Whole groups (assignments of `group_size` attempts) that fit the bound now."""
    return admissible_attempts(in_flight=in_flight, produced=produced, version=version,
                               max_staleness=max_staleness, batch_size=batch_size) // group_size


@dataclass
class AdmissionCounters:
    """The sampler's running totals of training attempts (persisted across restarts)."""

    admitted: int = 0
    "Attempts admitted (group_size per assignment)."
    judged: int = 0
    "Attempts whose final verdict arrived."
    produced: int = 0
    "Judged attempts that were trainable."
    next_seq: int = 0
    "Sequence number of the next assignment (its id derives from it)."

    @property
    def in_flight(self) -> int:
        return self.admitted - self.judged
