"""One `MetricsSnapshot` from the monitor's state: verdict points, heartbeats, stream state.

Consumes values (points, heartbeats, stream states, the held-out series, `now`); produces
the snapshot `whet status` shows and Prometheus exports. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bus import gauges
from bus.messages import Heartbeat, MetricsSnapshot, QueueDepth
from bus.nats_reads import StreamState
from monitoring import metrics
from monitoring.alerts import HeldoutSeries
from monitoring.config import MonitorConfig


def throughput(beats: list[Heartbeat], now: float) -> dict[str, float]:
    """`gauges.THROUGHPUT` over live instances (ready, beating within three intervals);
    a name is left out when no live instance reports its gauge."""
    out = {}
    for name, (kind, gauge, combine) in gauges.THROUGHPUT.items():
        values = [b.stats[gauge] for b in beats
                  if b.kind == kind and b.state == "ready" and gauge in b.stats
                  and now - b.beat_at <= b.silence_limit_s]
        if values:
            out[name] = sum(values) if combine == "sum" else sum(values) / len(values)
    return out


def queue_depths(states: list[StreamState]) -> list[QueueDepth]:
    """One row per durable consumer (or per stream without one)."""
    rows = []
    for st in states:
        if not st.consumers:
            rows.append(QueueDepth(stream=st.name, consumer="", stored=st.messages))
        for name, c in sorted(st.consumers.items()):
            rows.append(QueueDepth(stream=st.name, consumer=name, stored=st.messages,
                                   pending=c["pending"], in_flight=c["in_flight"],
                                   redelivered=c["redelivered"]))
    return rows


@dataclass
class Window:
    """The verdict-derived part of a snapshot, kept apart for the alert checks."""

    previous: list[metrics.VerdictPoint] = field(default_factory=list)
    current: list[metrics.VerdictPoint] = field(default_factory=list)

    @property
    def reward_delta(self) -> float | None:
        drift = metrics.reward_drift(metrics.training_rewards(self.previous),
                                     metrics.training_rewards(self.current))
        return drift.get("mean_delta")

    @property
    def rewards_counted(self) -> int:
        return min(len(metrics.training_rewards(self.previous)),
                   len(metrics.training_rewards(self.current)))


def build_snapshot(window: Window, cfg: MonitorConfig, now: float, *, monitor: str,
                   outcomes_total: dict[str, int], beats: list[Heartbeat],
                   states: list[StreamState], heldout: HeldoutSeries, alerts: list[str],
                   alert_trials: dict[str, list[str]] | None = None) -> MetricsSnapshot:
    previous, current = window.previous, window.current
    latest = heldout.latest()
    return MetricsSnapshot(
        at=now, monitor=monitor, window_s=cfg.window_s, verdicts=len(current),
        outcomes_total=dict(sorted(outcomes_total.items())),
        rates=metrics.rates(current),
        reward=metrics.reward_stats(metrics.training_rewards(current)),
        reward_previous=metrics.reward_stats(metrics.training_rewards(previous)),
        reward_drift=metrics.reward_drift(metrics.training_rewards(previous),
                                          metrics.training_rewards(current)),
        pass_rates=metrics.pass_rates(current, cfg.difficulty_step),
        staleness=metrics.staleness_histogram(current, cfg.staleness_cap),
        queues=queue_depths(states), throughput=throughput(beats, now),
        heldout_pass_rate=latest[1] if latest else None,
        heldout_version=latest[0] if latest else -1,
        alerts=sorted(alerts),
        alert_trials={name: ids for name, ids in sorted((alert_trials or {}).items()) if name in alerts})
