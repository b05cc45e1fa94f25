"""Spot checks by people: which trials to show, what a label says, how far judges and people agree.

Consumes trial records (`Trial`) and people's `Label`s; produces the stratum of a trial, a
stratified sample of the trials nobody has labelled yet, and the agreement table per stratum
with 95% Wilson intervals (`envs.stats.wilson_interval`). Strata: `pass`, `hack` (flagged
hacks), and each failure cause (`model.*`, `infra.*`). It does no I/O (`monitoring.review_log`
keeps the labels; `runtime.cli.review` asks people) and judges nothing itself.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable

import msgspec

from bus.messages import Trial
from envs.stats import wilson_interval


class Label(msgspec.Struct, kw_only=True):
    """One person's label of one trial; the newest label of a trial is the one that counts."""

    trial_id: str
    "The trial (attempt) id."
    stratum: str
    "The trial's stratum when labelled (see `stratum_of`)."
    outcome: str
    "The judge's outcome: pass, fail, hack or dropped."
    cause: str
    "The judge's cause ('' on a pass)."
    reward: float | None
    "The judge's reward (None when dropped)."
    reward_right: bool
    "The person finds the reward right."
    cause_right: bool
    "The person finds the cause right (on a pass: that nothing failed)."
    cause_should_be: str = ""
    "When the cause is wrong, the cause the person names ('pass' for none)."
    hack: bool = False
    "The person finds the attempt a hack (gaming the checks)."
    labeller: str = ""
    "Who labelled it."
    labelled_at: float = 0.0
    "Unix time of the label."


class Agreement(msgspec.Struct, frozen=True):
    """How often people found one aspect of the judges' verdicts right, over `n` labels."""

    agreed: int
    n: int

    @property
    def rate(self) -> float:
        return self.agreed / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.rate, self.n)


class StratumAgreement(msgspec.Struct, frozen=True):
    """Agreement of judges and people in one stratum: reward, cause and hack flag."""

    stratum: str
    reward: Agreement
    cause: Agreement
    hack: Agreement


def stratum_of(trial: Trial) -> str:
    """`pass`, `hack`, or the failure cause (`fail` when a failure names none)."""
    v = trial.verdict
    if v.outcome in ("pass", "hack"):
        return v.outcome
    return v.cause or v.outcome


def latest_labels(labels: Iterable[Label]) -> dict[str, Label]:
    """Trial id -> its newest label (later in the file wins on equal times)."""
    out: dict[str, Label] = {}
    for label in labels:
        kept = out.get(label.trial_id)
        if kept is None or label.labelled_at >= kept.labelled_at:
            out[label.trial_id] = label
    return out


def sample(trials: Iterable[Trial], *, per_stratum: int, seed: int,
           skip: Iterable[str] = (), first: Iterable[str] = ()) -> list[Trial]:
    """Up to `per_stratum` trials of each stratum, drawn at random (`seed`) from those not in
    `skip` (already labelled); trials in `first` (queued by the model judge) come first and
    do not count against the quota. Strata take turns, so a short session sees every one."""
    skipped, queued = set(skip), set(first)
    by_stratum: dict[str, list[Trial]] = defaultdict(list)
    front = []
    for trial in sorted(trials, key=lambda t: t.trial_id):
        if trial.trial_id in skipped:
            continue
        (front if trial.trial_id in queued else by_stratum[stratum_of(trial)]).append(trial)
    rng = random.Random(seed)
    drawn = {s: rng.sample(ts, min(per_stratum, len(ts))) for s, ts in sorted(by_stratum.items())}
    rounds = [trial for i in range(per_stratum) for ts in drawn.values() if i < len(ts)
              for trial in [ts[i]]]
    return front + rounds


def label_of(trial: Trial, *, reward_right: bool, cause_right: bool, cause_should_be: str = "",
             hack: bool, labeller: str, now: float) -> Label:
    """A person's answers about `trial` as a `Label` carrying what the judges said."""
    v = trial.verdict
    return Label(trial_id=trial.trial_id, stratum=stratum_of(trial), outcome=v.outcome,
                 cause=v.cause, reward=v.reward, reward_right=reward_right,
                 cause_right=cause_right, cause_should_be="" if cause_right else cause_should_be,
                 hack=hack, labeller=labeller, labelled_at=now)


def agreement(labels: Iterable[Label]) -> list[StratumAgreement]:
    """Per stratum (sorted), then `all`: how often the reward and the cause were right, and
    how often the judges' hack flag matched the person's."""
    cells: dict[str, list[Label]] = defaultdict(list)
    for label in latest_labels(labels).values():
        cells[label.stratum].append(label)
    every = [label for group in cells.values() for label in group]
    rows = [(s, cells[s]) for s in sorted(cells)] + [("all", every)]
    return [StratumAgreement(
        stratum=s,
        reward=Agreement(sum(x.reward_right for x in group), len(group)),
        cause=Agreement(sum(x.cause_right for x in group), len(group)),
        hack=Agreement(sum(x.hack == (x.outcome == "hack") for x in group), len(group)))
        for s, group in rows]


def agreement_lines(rows: list[StratumAgreement]) -> list[str]:
    """The agreement table as text, one line per stratum."""
    def cell(a: Agreement) -> str:
        low, high = a.interval
        return f"{a.agreed:>3}/{a.n:<3} {a.rate:.3f} [{low:.2f}, {high:.2f}]"

    width = max([len(r.stratum) for r in rows] + [7])
    head = ["reward right", "cause right", "hack flag right"]
    lines = [[r.stratum, cell(r.reward), cell(r.cause), cell(r.hack)] for r in rows]
    cw = max(len(c) for line in lines for c in line[1:])
    return [f"{'stratum':<{width}}  " + "  ".join(f"{h:<{cw}}" for h in head).rstrip()] + [
        f"{line[0]:<{width}}  " + "  ".join(f"{c:<{cw}}" for c in line[1:]).rstrip()
        for line in lines]
