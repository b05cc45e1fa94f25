"""Alerts: a rate out of its band, or training reward rising while held-out pass rate is flat.

Consumes rates (hack classes' `hack_rate.<kind>` under one band; each task's and group's
drop rate under `drop_band`), reward means, held-out pass rates (the evaluator's
`EvalRound`s: `HeldoutSeries`) and the trial ids behind each alert, with `now` passed in;
produces alert changes ('raised' / 'cleared') for the monitor to log as events, each naming
the trials that drove it (`linked_trials`), so `whet trace ID` opens them. An alert is
raised when its condition starts, again at most every `cooldown_s` while it lasts (or if it
comes back sooner), and cleared once when the condition ends. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from monitoring import metrics
from monitoring.config import Band, MonitorConfig

REWARD_VS_HELDOUT = "reward_rising_heldout_flat"
HACK_CLASS = "hack_rate."
"Prefix of the per-class hack rates (`hack_rate.early_exit`)."


def outside(value: float, band: Band) -> bool:
    """True when `value` is below the band's low or above its high end."""
    return (band.low is not None and value < band.low) or (band.high is not None and value > band.high)


def reward_outpaces_heldout(reward_delta: float | None, heldout_delta: float | None,
                            rise: float, flat: float) -> bool:
    """Reward gained at least `rise` while held-out pass rate gained at most `flat`: the
    policy may be learning to please the judge rather than to solve tasks."""
    if reward_delta is None or heldout_delta is None:
        return False
    return reward_delta >= rise and heldout_delta <= flat


@dataclass
class HeldoutSeries:
    """Held-out pass rates as the evaluator reported them, oldest first."""

    points: list[tuple[float, int, float]] = field(default_factory=list)
    "(unix time, policy version, overall pass rate)."

    def add(self, at: float, version: int, rate: float) -> None:
        """Record a report; one seen before (a replay after a reconnect) is ignored."""
        if (at, version, rate) in self.points:
            return
        self.points.append((at, version, rate))
        self.points.sort()
        del self.points[:-1000]

    def latest(self) -> tuple[int, float] | None:
        """The newest reported point as (version, pass rate), or None before any."""
        return (self.points[-1][1], self.points[-1][2]) if self.points else None

    def delta(self, now: float, span_s: float) -> float | None:
        """Latest rate minus the latest one reported at least `span_s` before `now`."""
        before = [rate for at, _, rate in self.points if at <= now - span_s]
        if not before or not self.points:
            return None
        return self.points[-1][2] - before[-1]


@dataclass(frozen=True)
class AlertChange:
    """An alert starting (or repeating after its cooldown) or ending."""

    name: str
    change: Literal["raised", "cleared"]
    value: float
    detail: dict[str, float | None]
    trials: tuple[str, ...] = ()
    "Ids of the trials that drove it (`whet trace ID`); none on clearing."


@dataclass
class AlertBook:
    """Which alerts are active and when each was last raised."""

    cooldown_s: float
    active: set[str] = field(default_factory=set)
    last_raised: dict[str, float] = field(default_factory=dict)

    def update(self, name: str, firing: bool, now: float) -> Literal["raised", "cleared"] | None:
        """The change of alert `name` at `now`: 'raised' when it starts firing or fires again past
        its cooldown, 'cleared' when it stops, None otherwise."""
        if not firing:
            if name in self.active:
                self.active.discard(name)
                return "cleared"
            return None
        self.active.add(name)
        last = self.last_raised.get(name)
        if last is not None and now - last < self.cooldown_s:
            return None
        self.last_raised[name] = now
        return "raised"


def linked_trials(points: list[metrics.VerdictPoint], k: int) -> dict[str, list[str]]:
    """The trial ids each alert would name, from the current window's points: the top-reward
    training verdicts for the reward alert, the latest flagged verdicts for hack rates."""
    out = {REWARD_VS_HELDOUT: metrics.top_reward_trials(points, k),
           "hack_rate": metrics.hack_trials(points, None, k)}
    for name in metrics.hack_class_rates(points):
        out[name] = metrics.hack_trials(points, name.removeprefix(HACK_CLASS), k)
    for name in metrics.drop_rates(points, 1):
        out[name] = metrics.drop_trials(points, name, k)
    return {name: ids for name, ids in out.items() if ids}


def check_alerts(book: AlertBook, cfg: MonitorConfig, now: float, *, rates: dict[str, float],
                 verdicts: int, reward_delta: float | None, rewards_counted: int,
                 heldout_delta: float | None,
                 trials: dict[str, list[str]] | None = None,
                 drops: dict[str, float] | None = None) -> list[AlertChange]:
    """Every alert change at `now`. Rates need `min_samples` verdicts in the window, the
    reward signal `min_samples` rewards in each of the two windows; `drops` (from
    `metrics.drop_rates`) holds only the tasks and groups with enough verdicts. A hack class,
    task or group that left the window clears its alert. `trials` names the trials behind each."""
    trials, drops = trials or {}, drops or {}
    changes = []
    bands = dict(cfg.bands)
    for name in {*rates, *drops, *book.active}:
        if name.startswith(HACK_CLASS):
            bands[name] = cfg.hack_class_band
        elif name.startswith((metrics.DROP_TASK, metrics.DROP_GROUP)):
            bands[name] = cfg.drop_band
    for name, band in sorted(bands.items()):
        drop = name.startswith((metrics.DROP_TASK, metrics.DROP_GROUP))
        value = drops.get(name) if drop else rates.get(name)
        firing = value is not None and (drop or verdicts >= cfg.min_samples) and outside(value, band)
        change = book.update(name, firing, now)
        if change:
            changes.append(AlertChange(name, change, value if value is not None else float("nan"),
                                       {"low": band.low, "high": band.high,
                                        "verdicts": float(verdicts)},
                                       _named(trials, name, change)))
    enough = rewards_counted >= cfg.min_samples
    firing = enough and reward_outpaces_heldout(reward_delta, heldout_delta, cfg.reward_rise,
                                                cfg.heldout_flat)
    change = book.update(REWARD_VS_HELDOUT, firing, now)
    if change:
        changes.append(AlertChange(REWARD_VS_HELDOUT, change, reward_delta or 0.0,
                                   {"reward_delta": reward_delta, "heldout_delta": heldout_delta,
                                    "reward_rise": cfg.reward_rise,
                                    "heldout_flat": cfg.heldout_flat},
                                   _named(trials, REWARD_VS_HELDOUT, change)))
    return changes


def _named(trials: dict[str, list[str]], name: str, change: str) -> tuple[str, ...]:
    return tuple(trials.get(name, ())) if change == "raised" else ()
