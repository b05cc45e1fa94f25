"""Names of the gauges actors report in their heartbeats, declared once.

Consumes nothing; produces names. An actor sets a gauge with
`bus.stats.gauges[gauges.EXECUTOR_JOBS_PER_S] = rate`; the heartbeat carries it in
`Heartbeat.stats`, `whet status` shows it per instance and the monitor combines it over the
live instances of the kind (`THROUGHPUT`) for its snapshot and the Prometheus endpoint.
Each value is a recent rate or duration (the last ten seconds to a minute of work), not a
lifetime average, so a stall shows.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Literal

GENERATOR_TOKENS_PER_S = "tokens_per_s"
"Generator: completion tokens sampled per second of generation."
LEARNER_STEP_TIME_S = "step_time_s"
"Learner: seconds of the latest optimizer step (update and weight publication excluded)."
EXECUTOR_JOBS_PER_S = "jobs_per_s"
"Executor: sandbox jobs finished per second."

Combine = Literal["sum", "mean"]

THROUGHPUT: dict[str, tuple[str, str, Combine]] = {
    "generator_tokens_per_s": ("generator", GENERATOR_TOKENS_PER_S, "sum"),
    "learner_step_time_s": ("learner", LEARNER_STEP_TIME_S, "mean"),
    "executor_jobs_per_s": ("executor", EXECUTOR_JOBS_PER_S, "sum"),
}
"Snapshot name: (actor kind, gauge, how instances combine)."


class RecentRate:
    """Events per second over the last `window_s` seconds (for the *_per_s gauges)."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self.times: deque[float] = deque()

    def tick(self, now: float | None = None) -> float:
        """Count one event; return the current rate."""
        now = time.monotonic() if now is None else now
        self.times.append(now)
        return self.per_s(now)

    def per_s(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        while self.times and self.times[0] < now - self.window_s:
            self.times.popleft()
        if len(self.times) < 2:
            return 0.0
        return round(len(self.times) / max(now - self.times[0], 1e-9), 3)
