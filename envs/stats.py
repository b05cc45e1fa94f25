"""Honest statistics for held-out pass rates: pass@1, its 95% interval, paired comparisons.

Consumes per-task counts (task id -> (passed, judged): attempts that passed out of attempts
judged); produces a pass rate with its interval (`estimate`) and the paired comparison of
two rounds on the tasks both judged (`paired_change`), and the mean per-task difference of
a score with its interval (`mean_difference`), and the mean of independent units such as
seeds with a Student-t interval (`mean_interval`); each function's docstring says why its
choice is honest. Pure functions, exact integer arithmetic for the p-value; no I/O and
nothing heavier than `math` and `statistics`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

Z95 = 1.959963984540054
"The two-sided 95% normal quantile."

T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
"Two-sided 95% quantiles of Student's t for 1 to 10 degrees of freedom."

Counts = Mapping[str, tuple[int, int]]
"Task id -> (attempts passed, attempts judged)."


def wilson_interval(rate: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion `rate` observed over `n` units; (0, 1) for n = 0."""
    if n <= 0:
        return 0.0, 1.0
    z2 = z * z
    centre = (rate + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(rate * (1 - rate) / n + z2 / (4 * n * n))
    # At p = 0 or 1 one end is exactly the edge; rounding must not move it off.
    low = 0.0 if rate <= 0 else max(0.0, centre - half)
    high = 1.0 if rate >= 1 else min(1.0, centre + half)
    return low, high


def sign_test(gained: int, lost: int) -> float:
    """Exact two-sided sign test (McNemar's exact test on discordant pairs): the chance of a
    split at least this uneven if gains and losses were equally likely."""
    n = gained + lost
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(gained, lost) + 1))
    return min(1.0, 2 * tail / 2 ** n)


def task_rates(counts: Counts) -> dict[str, float]:
    """Pass rate of each task with something judged."""
    return {task: passed / judged for task, (passed, judged) in counts.items() if judged > 0}


@dataclass(frozen=True)
class Estimate:
    """pass@1 of a set of tasks with its 95% interval."""

    rate: float
    low: float
    high: float
    tasks: int
    attempts: int


def estimate(counts: Counts) -> Estimate:
    """pass@1 over the tasks of `counts`, with the Wilson interval over tasks.

    pass@1 is the mean over tasks of passed / judged. With k samples per task it is the
    unbiased estimate of the chance that one sample passes, with less variance than one sample
    per task; with k = 1 it is the plain pass rate. Tasks with nothing judged are left out.
    The 95% interval has the *task* as the unit (n = tasks, p = pass@1). At k = 1 it is the
    textbook Wilson interval. At k > 1 it is conservative: a per-task rate in [0, 1] with mean p
    has variance at most p(1 - p), the variance Wilson assumes, so the interval never claims
    more precision than the number of tasks gives."""
    rates = task_rates(counts)
    rate = sum(rates.values()) / len(rates) if rates else 0.0
    low, high = wilson_interval(rate, len(rates))
    return Estimate(rate, low, high, len(rates), sum(j for _, j in counts.values()))


@dataclass(frozen=True)
class Paired:
    """Change of a set of tasks since a baseline round, on the tasks both judged."""

    tasks: int
    gained: int
    lost: int
    p_value: float
    delta: float
    "Mean change of per-task pass rate over the paired tasks."


def paired_change(baseline: Counts, current: Counts) -> Paired:
    """Gained and lost tasks since `baseline`, with the sign test's p-value.

    Only tasks judged in both rounds count. A task is *gained* when its pass rate rose, *lost*
    when it fell; ties (most tasks) carry no evidence either way. The p-value is the exact
    two-sided sign test of gained against lost,
    p = min(1, 2 * sum_{i <= min(b, c)} C(b + c, i) / 2^(b + c)), and 1 when b + c = 0. At k = 1
    this is the exact McNemar test (b = gained, c = lost). Pairing removes the spread of task
    difficulty, so a change shows at fewer tasks than two independent intervals need."""
    before, after = task_rates(baseline), task_rates(current)
    both = sorted(before.keys() & after.keys())
    gained = sum(after[t] > before[t] for t in both)
    lost = sum(after[t] < before[t] for t in both)
    delta = sum(after[t] - before[t] for t in both) / len(both) if both else 0.0
    return Paired(len(both), gained, lost, sign_test(gained, lost), delta)


def mean_difference(before: Mapping[str, float], after: Mapping[str, float]
                    ) -> tuple[int, float, float, float] | None:
    """(tasks, mean, low, high): the mean of after - before over the tasks both scored, with
    its 95% interval (normal approximation, the task the unit: pairing removes the spread of
    task difficulty); None for fewer than two such tasks."""
    common = sorted(before.keys() & after.keys())
    if len(common) < 2:
        return None
    diff = [after[t] - before[t] for t in common]
    mean = statistics.mean(diff)
    half = Z95 * statistics.stdev(diff) / math.sqrt(len(diff))
    return len(common), mean, mean - half, mean + half


def t95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df` degrees of freedom: the table up
    to 10, beyond it the Cornish-Fisher expansion in 1/df (within 0.003 of the exact value)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df <= len(T95):
        return T95[df - 1]
    z = Z95
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def mean_interval(values: Sequence[float]) -> tuple[float, float, float] | None:
    """(mean, low, high): the mean of `values` with its 95% Student-t interval, each value
    one independent unit (a seed's whole run). With few units the interval is wide, as it
    should be: runs of one config differ by which behaviour they settle into, a spread the
    task-paired `mean_difference` within one run cannot see. None for fewer than two."""
    if len(values) < 2:
        return None
    mean = statistics.mean(values)
    half = t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half
