"""Held-out evaluation arithmetic: rounds, pass rates by domain, and the overfitting alarm.

Pure functions and small value classes. Consumes eval verdict outcomes (domain, policy
version, passed) and the history of evaluations; produces `EvalPoint`s and the warning
"training reward rises while held-out pass rate does not". It publishes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bus.messages import EvalPoint, Task


def round_assignment_id(prefix: str, round_version: int, index: int) -> str:
    """Stable id of the `index`-th eval assignment of the round for `round_version`."""
    return f"{prefix}-e{round_version:06d}-{index:05d}"


def round_of(assignment_id: str) -> int | None:
    """The round version an eval assignment id belongs to, or None if it is not one."""
    _, sep, rest = assignment_id.rpartition("-e")
    head = rest.split("-")[0]
    return int(head) if sep and head.isdigit() else None


def pick_heldout(tasks: list[Task], per_domain: int) -> dict[str, list[Task]]:
    """Held-out tasks by domain, the first `per_domain` of each in id order (ids are content
    hashes, so this is a fixed, unbiased choice that stays the same every round)."""
    out: dict[str, list[Task]] = {}
    for task in sorted(tasks, key=lambda t: t.task_id):
        if task.split != "heldout":
            continue
        chosen = out.setdefault(task.domain, [])
        if len(chosen) < per_domain:
            chosen.append(task)
    return out


@dataclass
class Tally:
    passed: int = 0
    total: int = 0
    reward: float = 0.0


@dataclass
class Round:
    """The verdicts of one round, keyed by the attempts' policy version and domain."""

    version: int
    expected: int
    started_at: float
    received: int = 0
    dropped: int = 0
    by_version: dict[int, dict[str, Tally]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    "Attempt ids counted: a verdict delivered twice counts once."

    def add(self, attempt_id: str, policy_version: int, domain: str, outcome: str,
            reward: float | None = None) -> bool:
        """Count one verdict; False (and nothing counted) if its attempt was counted."""
        if attempt_id in self.seen:
            return False
        self.seen.add(attempt_id)
        self.received += 1
        if outcome == "dropped" or reward is None:  # infrastructure: no evidence about the policy
            self.dropped += 1
            return True
        tally = self.by_version.setdefault(policy_version, {}).setdefault(domain, Tally())
        tally.total += 1
        tally.passed += outcome == "pass"
        tally.reward += reward
        return True

    @property
    def complete(self) -> bool:
        return self.received >= self.expected

    def points(self, train_rewards: dict[int, float]) -> list[EvalPoint]:
        """One evaluation per policy version that produced attempts in this round."""
        out = []
        for version in sorted(self.by_version):
            tallies = self.by_version[version]
            passed = sum(t.passed for t in tallies.values())
            total = sum(t.total for t in tallies.values())
            out.append(EvalPoint(
                version=version,
                pass_rates={d: t.passed / t.total for d, t in sorted(tallies.items()) if t.total},
                attempts={d: t.total for d, t in sorted(tallies.items())},
                overall=passed / total if total else 0.0,
                rewards={d: t.reward / t.total for d, t in sorted(tallies.items()) if t.total},
                reward=sum(t.reward for t in tallies.values()) / total if total else None,
                train_reward=train_rewards.get(version), complete=self.complete))
        return out


def reward_without_heldout_gain(history: list[EvalPoint], *, window: int, reward_rise: float,
                                tolerance: float) -> str:
    """A sentence saying why to worry, or '' when all is well.

    Over the last `window` evaluations that know their training reward, the training reward
    rose by more than `reward_rise` while the held-out pass rate rose by no more than
    `tolerance`: the policy may be learning the training tasks, not the skill.
    """
    known = [p for p in history if p.train_reward is not None]
    if len(known) < window:
        return ""
    first, last = known[-window], known[-1]
    reward_gain = last.train_reward - first.train_reward  # type: ignore[operator]
    heldout_gain = last.overall - first.overall
    if reward_gain > reward_rise and heldout_gain <= tolerance:
        return (f"training reward rose {reward_gain:+.3f} from version {first.version} to "
                f"{last.version} while held-out pass rate moved {heldout_gain:+.3f}")
    return ""
