"""The Prometheus endpoint: the monitor's latest snapshot as metrics, served over HTTP.

Consumes a function returning the latest `MetricsSnapshot`; produces the text exposition
format on `GET /metrics` from a small anyio HTTP listener (no thread, stops with the actor's
task group). Every value is computed by the monitor; nothing here is measured.
"""

from __future__ import annotations

from typing import Callable, Iterator

import anyio
import anyio.abc
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from bus.messages import MetricsSnapshot, RewardStats

_REWARD_STATS = ("mean", "std", "p10", "p50", "p90", "min", "max")


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"whet_{name}", doc, labels=labels)


def _reward(family: GaugeMetricFamily, window: str, stats: RewardStats) -> None:
    for stat in _REWARD_STATS:
        family.add_metric([window, stat], getattr(stats, stat))


def snapshot_metrics(snap: MetricsSnapshot) -> Iterator[Metric]:
    """Every metric family of one snapshot."""
    totals = CounterMetricFamily("whet_verdicts", "Verdicts seen since the monitor started.",
                                 labels=["purpose", "outcome"])
    for key, count in snap.outcomes_total.items():
        purpose, _, outcome = key.partition(".")
        totals.add_metric([purpose, outcome], count)
    yield totals
    window = _gauge("window_verdicts", "Verdicts in the current window.")
    window.add_metric([], snap.verdicts)
    yield window
    classes = _gauge("hack_class_rate", "Share of the window's verdicts flagged as each hack class.",
                     ["kind"])
    for rate, value in sorted(snap.rates.items()):
        if rate.startswith("hack_rate."):
            classes.add_metric([rate.removeprefix("hack_rate.")], value)
            continue
        family = _gauge(rate, f"{rate.replace('_', ' ')} over the current window.")
        family.add_metric([], value)
        yield family
    yield classes
    reward = _gauge("reward", "Training reward summary per window.", ["window", "stat"])
    _reward(reward, "current", snap.reward)
    _reward(reward, "previous", snap.reward_previous)
    yield reward
    counts = _gauge("reward_count", "Training rewards per window.", ["window"])
    counts.add_metric(["current"], snap.reward.count)
    counts.add_metric(["previous"], snap.reward_previous.count)
    yield counts
    drift = _gauge("reward_drift", "Reward drift between the two windows.", ["measure"])
    for measure, value in sorted(snap.reward_drift.items()):
        drift.add_metric([measure], value)
    yield drift
    cells = _gauge("pass_rate", "Pass rate by purpose, domain and difficulty.",
                   ["purpose", "domain", "difficulty"])
    judged = _gauge("judged", "Judged verdicts by purpose, domain and difficulty.",
                    ["purpose", "domain", "difficulty"])
    for row in snap.pass_rates:
        cells.add_metric([row.purpose, row.domain, row.difficulty], row.rate)
        judged.add_metric([row.purpose, row.domain, row.difficulty], row.judged)
    yield cells
    yield judged
    yield from _state_metrics(snap)


def _state_metrics(snap: MetricsSnapshot) -> Iterator[Metric]:
    stale = _gauge("staleness_verdicts", "Verdicts in the window by policy version lag.", ["lag"])
    for lag, count in snap.staleness.items():
        stale.add_metric([lag], count)
    yield stale
    labels = ["stream", "consumer"]
    families = {name: _gauge(f"queue_{name}", f"Consumer {name.replace('_', ' ')} messages.", labels)
                for name in ("stored", "pending", "in_flight", "redelivered")}
    for row in snap.queues:
        for name, family in families.items():
            family.add_metric([row.stream, row.consumer], getattr(row, name))
    yield from families.values()
    for name, value in sorted(snap.throughput.items()):
        family = _gauge(name, f"{name.replace('_', ' ')}, over live actors.")
        family.add_metric([], value)
        yield family
    if snap.heldout_pass_rate is not None:
        heldout = _gauge("heldout_pass_rate", "Latest held-out pass rate from the evaluator.",
                         ["policy_version"])
        heldout.add_metric([str(snap.heldout_version)], snap.heldout_pass_rate)
        yield heldout
    alerts = _gauge("alert_active", "1 while the named alert is active.", ["alert"])
    for name in snap.alerts:
        alerts.add_metric([name], 1)
    yield alerts
    at = _gauge("snapshot_timestamp_seconds", "Unix time of the snapshot.")
    at.add_metric([], snap.at)
    yield at


class SnapshotCollector:
    """A prometheus_client collector that reads the latest snapshot at scrape time."""

    def __init__(self, latest: Callable[[], MetricsSnapshot | None]) -> None:
        self.latest = latest

    def collect(self) -> Iterator[Metric]:
        snap = self.latest()
        if snap is not None:
            yield from snapshot_metrics(snap)


def registry_for(latest: Callable[[], MetricsSnapshot | None]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(latest))
    return registry


async def open_listener(host: str, port: int) -> anyio.abc.Listener:
    """Bind the endpoint's socket (OSError if the port is taken)."""
    return await anyio.create_tcp_listener(local_host=host, local_port=port)


def bound_port(listener: anyio.abc.Listener) -> int:
    return listener.extra(anyio.abc.SocketAttribute.local_port)


async def serve_metrics(listener: anyio.abc.Listener, registry: CollectorRegistry) -> None:
    """Answer `GET /metrics` on `listener` until cancelled."""
    async with listener:
        await listener.serve(lambda stream: _answer(stream, registry))


async def _answer(stream: anyio.abc.SocketStream, registry: CollectorRegistry) -> None:
    async with stream:
        head = b""
        with anyio.move_on_after(5):
            while b"\r\n\r\n" not in head and len(head) < 8192:
                try:
                    head += await stream.receive(4096)
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return
        parts = head.split(b" ", 2)
        path = parts[1].split(b"?")[0] if len(parts) > 1 else b""
        if parts[0] == b"GET" and path in (b"/metrics", b"/"):
            status, body, kind = b"200 OK", generate_latest(registry), CONTENT_TYPE_LATEST.encode()
        else:
            status, body, kind = b"404 Not Found", b"only GET /metrics\n", b"text/plain"
        try:
            await stream.send(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind
                              + b"\r\nContent-Length: " + str(len(body)).encode()
                              + b"\r\nConnection: close\r\n\r\n" + body)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
