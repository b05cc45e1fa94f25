"""Names of the gauges actors report in their heartbeats, declared once.

Consumes nothing; produces names. An actor sets a gauge with
`bus.stats.gauges[gauges.EXECUTOR_JOBS_PER_S] = rate`; the heartbeat carries it in
`Heartbeat.stats`, `whet status` shows it per instance and the monitor combines it over the
live instances of the kind (`THROUGHPUT`) for its snapshot and the Prometheus endpoint.
The throughput gauges are recent rates or durations (the last ten seconds to a minute of
work), not lifetime averages, so a stall shows; the progress gauges (gates, held-out round,
attempts toward the next step) are counts, read by the live status line of `whet up`.
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

GATE_DONE = "gate_done"
"Sampler, evaluator: tasks through the intake gates so far (accepted or not)."
GATE_TOTAL = "gate_total"
"Sampler, evaluator: tasks the intake gates have to go through."
ROUND_VERSION = "round_version"
"Evaluator: policy version of the newest held-out round started (-1: none yet)."
ROUND_JUDGED = "round_judged"
"Evaluator: attempts of that round judged so far."
ROUND_SIZE = "round_size"
"Evaluator: attempts in that round."
ROUND_REPORTED = "round_reported"
"Evaluator: version of the newest round reported (-1: none yet)."
LEARNER_STEP = "step"
"Learner: learner steps done."
LEARNER_HELD = "held_attempts"
"Learner: judged attempts gathered toward its next step."
LEARNER_WAITING_FOR_ROUND = "waiting_for_round"
"Learner: the version whose held-out round it waits for before moving past it (-1: none)."
SAMPLER_REPAIR_TASKS = "repair_tasks"
"Sampler: repair tasks made from failed tool episodes and added to the pool (`envs.repair`)."
JUDGE_TOOL_PREFIX = "judge.tool."
"""Judge: tool calls of tool episodes run so far, one gauge per tool (`judge.tool.read_file`),
and `judge.tool.malformed` for turns that held no well-formed call."""
TOOL_MALFORMED = "malformed"
"The tool name of a turn without a well-formed tool call (`judge.tool.malformed`)."
SANDBOX_CPU_S = "sandbox_cpu_s"
"""Executor, sampler, evaluator: CPU seconds their sandboxed jobs used so far, as the jobs'
own cgroups measured them (sandboxed processes never show in their parents' CPU counters)."""

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
