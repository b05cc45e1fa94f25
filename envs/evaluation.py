"""Held-out evaluation arithmetic: the tasks of a round, pass rates with intervals, paired
comparisons with the baseline version, and the overfitting alarm.

Pure functions and small value classes. Consumes tasks (`pick_heldout`, stratified by
`envs.strata`), eval verdict outcomes (attempt id, policy version, task, domain, rung,
outcome, reward), the baseline's task outcomes and the history of evaluations; produces an
`EvalRound` per policy version of a round (statistics from `envs.stats`: overall, per domain
and per rung), its short `EvalPoint`, and the warning "training reward rises while held-out
pass rate does not". It publishes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

from bus.messages import EvalPoint, EvalRound, HeldoutScore, Task, TaskOutcome
from envs.stats import estimate, paired_change
from envs.strata import choose, strata


def round_assignment_id(prefix: str, round_version: int, index: int) -> str:
    """Stable id of the `index`-th eval assignment of the round for `round_version`."""
    return f"{prefix}-e{round_version:06d}-{index:05d}"


def round_of(assignment_id: str) -> int | None:
    """The round version an eval assignment id belongs to, or None if it is not one."""
    _, sep, rest = assignment_id.rpartition("-e")
    head = rest.split("-")[0]
    return int(head) if sep and head.isdigit() else None


def pick_heldout(tasks: list[Task], per_domain: int, split: str = "heldout",
                 domain_tasks: Mapping[str, int] | None = None,
                 usable: Callable[[Task], bool] = lambda task: True) -> dict[str, list[Task]]:
    """Evaluation tasks of `split` by domain: `per_domain` of each (`domain_tasks` sets another
    number for the domains it names), shared among the domain's rungs and program families in
    proportion to the split, each stratum's first `usable` ones (all by default; the gates'
    verdict when gating) in a salted content-hash order (`envs.strata.choose`): a fixed,
    unbiased choice that stays the same every round."""
    limits = domain_tasks or {}
    by_domain: dict[str, list[Task]] = {}
    for task in tasks:
        if task.split == split:
            by_domain.setdefault(task.domain, []).append(task)
    return {d: choose(strata(ts), limits.get(d, per_domain), usable)
            for d, ts in sorted(by_domain.items())}


@dataclass
class TaskCount:
    """One task's attempts in a round, as they are counted."""

    domain: str
    rung: int = 0
    passed: int = 0
    judged: int = 0
    reward: float = 0.0


@dataclass
class Round:
    """The verdicts of one round, keyed by the attempts' policy version and task."""

    version: int
    expected: int
    started_at: float
    received: int = 0
    dropped: int = 0
    by_version: dict[int, dict[str, TaskCount]] = field(default_factory=dict)
    "Policy version -> task id -> that task's attempts."
    seen: set[str] = field(default_factory=set)
    "Attempt ids counted: a verdict delivered twice counts once."

    def add(self, attempt_id: str, policy_version: int, task_id: str, domain: str, outcome: str,
            reward: float | None = None, rung: int = 0) -> bool:
        """Count one verdict of a task at `rung` (`envs.strata.rung_of`); False (and nothing
        counted) if its attempt was counted."""
        if attempt_id in self.seen:
            return False
        self.seen.add(attempt_id)
        self.received += 1
        if outcome == "dropped" or reward is None:  # infrastructure: no evidence about the policy
            self.dropped += 1
            return True
        counts = self.by_version.setdefault(policy_version, {})
        count = counts.setdefault(task_id, TaskCount(domain, rung))
        count.judged += 1
        count.passed += outcome == "pass"
        count.reward += reward
        return True

    @property
    def complete(self) -> bool:
        return self.received >= self.expected

    def outcomes(self, version: int) -> dict[str, TaskOutcome]:
        """Task id -> outcome of policy `version`'s attempts in this round."""
        return {t: TaskOutcome(domain=c.domain, passed=c.passed, judged=c.judged, rung=c.rung)
                for t, c in sorted(self.by_version.get(version, {}).items())}

    def result(self, version: int, *, trained: set[str], baseline: dict[str, TaskOutcome],
               baseline_version: int, samples_per_task: int, train_reward: float | None,
               now: float, split: str = "heldout") -> EvalRound:
        """The held-out result of policy `version`'s attempts in this round, each score
        paired with `baseline` (task outcomes of `baseline_version`): overall, on the trained
        and the transfer domains, per domain and per domain's rung."""
        counts = self.by_version.get(version, {})
        tasks = self.outcomes(version)
        domains = sorted({c.domain for c in counts.values()})
        judged = sum(c.judged for c in counts.values())

        def mean_reward(domain: str | None) -> float | None:
            cs = [c for c in counts.values() if domain is None or c.domain == domain]
            n = sum(c.judged for c in cs)
            return sum(c.reward for c in cs) / n if n else None

        return EvalRound(
            round=self.version, version=version,
            overall=score(tasks, baseline) or HeldoutScore(),
            trained=score(tasks, baseline, lambda o: o.domain in trained),
            transfer=score(tasks, baseline, lambda o: o.domain not in trained),
            domains={d: score(tasks, baseline, lambda o, d=d: o.domain == d) for d in domains},
            baseline_version=baseline_version, samples_per_task=samples_per_task,
            reward=mean_reward(None) if judged else None,
            rewards={d: r for d in domains if (r := mean_reward(d)) is not None},
            train_reward=train_reward, complete=self.complete, dropped=self.dropped,
            tasks=tasks, reported_at=now, split=split, rungs=by_rung(tasks, baseline))


def score(tasks: dict[str, TaskOutcome], baseline: dict[str, TaskOutcome],
          keep: Callable[[TaskOutcome], bool] = lambda o: True) -> HeldoutScore | None:
    """pass@1 with its interval, and the paired change since `baseline`, over the tasks
    `keep` accepts (all by default; a task is paired by id, so a baseline kept from before
    tasks carried their rung pairs the same); None if there are none."""
    now = {t: (o.passed, o.judged) for t, o in tasks.items() if keep(o)}
    if not now:
        return None
    before = {t: (o.passed, o.judged) for t, o in baseline.items() if t in now}
    e, p = estimate(now), paired_change(before, now)
    return HeldoutScore(rate=e.rate, low=e.low, high=e.high, tasks=e.tasks, attempts=e.attempts,
                        paired=p.tasks, gained=p.gained, lost=p.lost, p_value=p.p_value,
                        delta=p.delta)


def by_rung(tasks: dict[str, TaskOutcome],
            baseline: dict[str, TaskOutcome]) -> dict[str, dict[int, HeldoutScore]]:
    """Domain -> rung -> the score of that domain's tasks at that rung (see `score`)."""
    cells = sorted({(o.domain, o.rung) for o in tasks.values()})
    out: dict[str, dict[int, HeldoutScore]] = {}
    for d, r in cells:
        found = score(tasks, baseline, lambda o, d=d, r=r: (o.domain, o.rung) == (d, r))
        if found is not None:
            out.setdefault(d, {})[r] = found
    return out


def rung_fields(result: EvalRound) -> dict[str, dict[int, dict[str, float | int]]]:
    """The per-rung results of a round as plain fields for its log event: domain -> rung ->
    rate, interval, tasks and the paired change since the baseline."""
    return {d: {r: {"rate": round(s.rate, 4), "low": round(s.low, 4), "high": round(s.high, 4),
                    "tasks": s.tasks, "paired": s.paired, "gained": s.gained, "lost": s.lost,
                    "p_value": float(f"{s.p_value:.3g}")} for r, s in rungs.items()}
            for d, rungs in result.rungs.items()}


def point_of(result: EvalRound) -> EvalPoint:
    """The short form of a result kept in the evaluator's history (the divergence check)."""
    return EvalPoint(version=result.version,
                     pass_rates={d: s.rate for d, s in result.domains.items()},
                     attempts={d: s.attempts for d, s in result.domains.items()},
                     overall=result.overall.rate, rewards=result.rewards, reward=result.reward,
                     train_reward=result.train_reward, complete=result.complete)


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
