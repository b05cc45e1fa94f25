"""Run-health metrics computed from verdicts: pure functions over `VerdictPoint` values.

Consumes verdicts (reduced to points: when, purpose, outcome, cause, reward, domain,
difficulty, version lag); produces rates, reward summaries, drift, pass rates and the
staleness histogram. Each function's docstring defines what it counts (an infrastructure
failure: `is_infra`; a timeout: `is_timeout`; a hack class: `hack_class`); pass rates leave
dropped verdicts out; rewards and drift use training verdicts only (the reward the learner
sees). No I/O, no clocks: callers pass `now`.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from bus.messages import PassRate, RewardStats, Verdict


@dataclass(frozen=True)
class VerdictPoint:
    """What the metrics need of one verdict. Its version lag is the policy version current when
    the verdict was recorded minus the attempt's (oldest turn's) version."""

    at: float
    purpose: str
    outcome: str
    cause: str = ""
    reward: float | None = None
    domain: str = ""
    difficulty: float = 0.0
    lag: int | None = None
    verdict_id: str = ""
    "The verdict's (and its trial's) id, for `whet trace`."
    task_id: str = ""
    group_id: str = ""


def point_of(verdict: Verdict, current_version: int, now: float) -> VerdictPoint:
    """Reduce a verdict; `current_version` is the latest published policy (-1: none yet)."""
    attempt = verdict.attempt
    lag = max(0, current_version - attempt.policy_version) if current_version >= 0 else None
    return VerdictPoint(at=verdict.judged_at or now, purpose=attempt.purpose,
                        outcome=verdict.outcome, cause=verdict.cause, reward=verdict.reward,
                        domain=attempt.task.domain, difficulty=attempt.task.difficulty, lag=lag,
                        verdict_id=verdict.verdict_id, task_id=attempt.task.task_id,
                        group_id=attempt.group_id)


def is_infra(p: VerdictPoint) -> bool:
    """An infrastructure failure: outcome 'dropped', or a cause under 'infra.' (the judge drops
    what infrastructure broke, so both say the same; either counts)."""
    return p.outcome == "dropped" or p.cause.startswith("infra.")


def is_timeout(p: VerdictPoint) -> bool:
    """A timeout: a cause whose last part is 'timeout' ('model.timeout')."""
    return p.cause.rsplit(".", 1)[-1] == "timeout"


def split_windows(points: list[VerdictPoint], now: float,
                  window_s: float) -> tuple[list[VerdictPoint], list[VerdictPoint]]:
    """(previous window, current window): (now-2w, now-w] and (now-w, now]."""
    previous = [p for p in points if now - 2 * window_s < p.at <= now - window_s]
    current = [p for p in points if now - window_s < p.at <= now]
    return previous, current


def _share(count: int, total: int) -> float:
    return count / total if total else 0.0


def rates(points: list[VerdictPoint]) -> dict[str, float]:
    """Execution, timeout, infrastructure and hack rates over all points; pass rates per purpose.
    An execution success is neither infrastructure failure nor timeout: the job ran and ended on
    its own; pass rates count 'pass' over judged verdicts (dropped ones left out)."""
    out: dict[str, float] = {}
    if points:
        n = len(points)
        infra = sum(is_infra(p) for p in points)
        timeouts = sum(is_timeout(p) for p in points)
        clean = sum(not is_infra(p) and not is_timeout(p) for p in points)
        out.update(execution_success_rate=clean / n, timeout_rate=timeouts / n,
                   infra_failure_rate=infra / n,
                   hack_rate=_share(sum(p.outcome == "hack" for p in points), n))
        out.update(hack_class_rates(points))
    for purpose in ("train", "eval"):
        judged = [p for p in points if p.purpose == purpose and p.outcome != "dropped"]
        if judged:
            out[f"{purpose}_pass_rate"] = _share(sum(p.outcome == "pass" for p in judged),
                                                 len(judged))
    return out


def hack_class(p: VerdictPoint) -> str | None:
    """The hack class of a flagged verdict ('early_exit' for cause 'hack.early_exit': the judge
    names the first sign it found)."""
    if p.outcome != "hack":
        return None
    return p.cause.split(".", 1)[1] if p.cause.startswith("hack.") else "unknown"


def hack_class_rates(points: list[VerdictPoint]) -> dict[str, float]:
    """`hack_rate.<kind>`: each class's share of all points, for the classes seen in them."""
    counts = Counter(k for k in map(hack_class, points) if k is not None)
    return {f"hack_rate.{k}": v / len(points) for k, v in sorted(counts.items())}


DROP_TASK, DROP_GROUP = "drop_rate.task.", "drop_rate.group."
"Prefixes of the drop rates of one task and of one group."


def _drop_keys(p: VerdictPoint) -> list[str]:
    return [prefix + v for prefix, v in ((DROP_TASK, p.task_id), (DROP_GROUP, p.group_id)) if v]


def drop_rates(points: list[VerdictPoint], min_count: int) -> dict[str, float]:
    """The share of 'dropped' verdicts of each task and each group with at least `min_count`
    verdicts in the window (`drop_rate.task.<task id>`, `drop_rate.group.<group id>`)."""
    seen: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    for p in points:
        for key in _drop_keys(p):
            seen[key] += 1
            dropped[key] += p.outcome == "dropped"
    return {k: dropped[k] / n for k, n in sorted(seen.items()) if n >= min_count}


def drop_trials(points: list[VerdictPoint], key: str, k: int) -> list[str]:
    """Ids of the latest `k` dropped verdicts of the task or group `key` names."""
    hits = [p for p in points if p.outcome == "dropped" and p.verdict_id and key in _drop_keys(p)]
    hits.sort(key=lambda p: (-p.at, p.verdict_id))
    return [p.verdict_id for p in hits[:k]]


def top_reward_trials(points: list[VerdictPoint], k: int) -> list[str]:
    """Ids of the `k` training verdicts with the highest reward (latest first among equals):
    the trials that drove a rise of the mean training reward."""
    scored = [p for p in points if p.purpose == "train" and p.reward is not None and p.verdict_id]
    scored.sort(key=lambda p: (-p.reward, -p.at, p.verdict_id))
    return [p.verdict_id for p in scored[:k]]


def hack_trials(points: list[VerdictPoint], kind: str | None, k: int) -> list[str]:
    """Ids of the latest `k` verdicts flagged as hacks (of class `kind`, or of any with None)."""
    hits = [p for p in points if hack_class(p) is not None and p.verdict_id
            and (kind is None or hack_class(p) == kind)]
    hits.sort(key=lambda p: (-p.at, p.verdict_id))
    return [p.verdict_id for p in hits[:k]]


def training_rewards(points: list[VerdictPoint]) -> list[float]:
    """The rewards of the training verdicts among `points` (the reward the learner sees)."""
    return [p.reward for p in points if p.purpose == "train" and p.reward is not None]


def reward_stats(values: list[float]) -> RewardStats:
    """Count, mean, spread and percentiles of `values`."""
    if not values:
        return RewardStats()
    a = np.asarray(values, dtype=np.float64)
    p10, p50, p90 = np.percentile(a, [10, 50, 90])
    return RewardStats(count=len(values), mean=float(a.mean()), std=float(a.std()),
                       p10=float(p10), p50=float(p50), p90=float(p90),
                       min=float(a.min()), max=float(a.max()))


def ks_distance(a: list[float], b: list[float]) -> float:
    """Two-sample Kolmogorov-Smirnov distance: the largest gap between the empirical CDFs."""
    if not a or not b:
        return 0.0
    x, y = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    grid = np.concatenate([x, y])
    cdf_x = np.searchsorted(x, grid, side="right") / len(x)
    cdf_y = np.searchsorted(y, grid, side="right") / len(y)
    return float(np.max(np.abs(cdf_x - cdf_y)))


def reward_drift(previous: list[float], current: list[float]) -> dict[str, float]:
    """How the reward distribution moved between two windows; empty if either is empty."""
    if not previous or not current:
        return {}
    return {"mean_delta": float(np.mean(current) - np.mean(previous)),
            "ks": ks_distance(previous, current)}


def difficulty_bucket(difficulty: float, step: float) -> str:
    """Lower bound of the bucket `difficulty` falls in, as text ('0', '1.5')."""
    return f"{math.floor(difficulty / step) * step:g}"


def pass_rates(points: list[VerdictPoint], step: float) -> list[PassRate]:
    """Pass rate by purpose, domain and difficulty bucket, sorted; dropped verdicts left out."""
    cells: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for p in points:
        if p.outcome == "dropped":
            continue
        cell = cells[(p.purpose, p.domain, difficulty_bucket(p.difficulty, step))]
        cell[0] += p.outcome == "pass"
        cell[1] += 1
    return [PassRate(purpose=k[0], domain=k[1], difficulty=k[2], passed=v[0], judged=v[1],
                     rate=v[0] / v[1]) for k, v in sorted(cells.items())]


def staleness_histogram(points: list[VerdictPoint], cap: int) -> dict[str, int]:
    """Verdict count by version lag; lags at or past `cap` share the bucket '<cap>+'."""
    counts: Counter[str] = Counter()
    for p in points:
        if p.lag is not None:
            counts[str(p.lag) if p.lag < cap else f"{cap}+"] += 1
    return dict(sorted(counts.items(), key=lambda kv: int(kv[0].rstrip("+"))))
