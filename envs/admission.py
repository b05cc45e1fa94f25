"""Staleness admission, as AReaL does it: admit work only while it can still be trained on.

Pure functions. With v the learner's steps (batches consumed; the policy version, as long
as the learner never restarted from an older checkpoint), staleness bound s and batch size
B, the attempts admitted so far and still useful must satisfy

    in_flight + produced <= (v + s + 1) * B

where `produced` counts trainable samples delivered to the learner and `in_flight` counts
attempts admitted but not yet judged. Attempts judged but not trainable (infrastructure
drops) leave `in_flight` without joining `produced`, so they free their budget instead of
stalling the learner. With refill (`training.zero_signal`), `SignalRefunds` takes the
members of each finished group without a signal out of `produced` again, so the sampler
admits a replacement for it, up to what refill batches can take (`refund_credit`). Eval
work is outside this budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence


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


def refund_credit(refunded: int, *, version: int, max_staleness: int, batch_size: int,
                  most: int) -> int:
    """The refunded attempts that free budget: at most (v + s + 1) * (most - B), what refill
    batches of at most `most` members can take beyond B each. Groups without a signal then
    stay within the same bound, at `most` a step, and are never sampled further ahead than
    the learner can consume them (uncapped, a policy that gives no signal anywhere would have
    the sampler run ahead without end)."""
    return min(refunded, staleness_capacity(version, max_staleness, max(most - batch_size, 0)))


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
    refunded: int = 0
    "Produced attempts given back by refill: members of finished groups without a signal."

    @property
    def in_flight(self) -> int:
        return self.admitted - self.judged


def has_signal(rewards: Sequence[float | None], eps: float = 1e-6) -> bool:
    """Whether a group's rewards (None: no reward) give some member a nonzero advantage:
    two or more present whose population std reaches `eps`, as
    `policy.objective.group_advantages` decides (without importing torch here)."""
    present = [r for r in rewards if r is not None]
    if len(present) < 2:
        return False
    mean = sum(present) / len(present)
    return math.sqrt(sum((r - mean) ** 2 for r in present) / len(present)) >= eps


@dataclass
class SignalRefunds:
    """Refill's bookkeeping: the rewards of each group's verdicts until all `group_size`
    have arrived; then, if they give no advantage (`has_signal`), its members with a reward
    are refunded (DAPO's dynamic sampling: each such group is sampled again)."""

    open: dict[str, dict[str, float | None]] = field(default_factory=dict)
    "group id -> verdict id -> reward (None: not trainable), for groups not yet finished."

    def record(self, group_id: str, group_size: int, verdict_id: str,
               reward: float | None) -> int:
        """Count one verdict of a group (a repeated verdict id once); returns the attempts
        refunded now: the group's rewarded members if this finished it without a signal."""
        members = self.open.setdefault(group_id, {})
        members[verdict_id] = reward
        if len(members) < max(1, group_size):
            return 0
        rewards = list(self.open.pop(group_id).values())
        return 0 if has_signal(rewards) else sum(r is not None for r in rewards)
