"""The live status line of a running stack: what it is doing now, in one line.

Consumes the actors' latest heartbeats (KV whet-actors: state and the progress gauges of
`bus.gauges`), the run config (counts, `max_steps`, batch size) and, once the learner has
stepped, the latest training figures; produces text such as

    4m12s  gating 37/450 tasks | held-out round at version 0: 12/109 attempts | step 1/24: 12/32 attempts

and, in a run with tool episodes, `tools 10/12 well-formed (83%): read_file 5, run_tests 4, ...`.

Pure: no I/O. `runtime.stack.progress` reads the heartbeats and shows the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bus import gauges as g
from bus.messages import Heartbeat
from runtime.config import RunConfig
from runtime.stack.tool_tally import ToolTally, tally


@dataclass(frozen=True)
class Counts:
    """The progress counters of one moment, summed over the live instances (also the row
    `runtime.stack.progress` keeps in metrics/progress.csv)."""

    ready: int = 0
    expected: int = 0
    waiting: tuple[str, ...] = ()
    gated: int = 0
    gate_total: int = 0
    judged: int = 0
    round_version: int = -1
    round_judged: int = 0
    round_size: int = 0
    round_reported: int = -1
    step: int = 0
    held_attempts: int = 0
    waiting_for_round: int = -1
    sandbox_cpu_s: float = 0.0
    tools: ToolTally = ToolTally()
    "Tool calls of tool episodes, from the judges' gauges (empty without tool episodes)."

    def row(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("waiting", "tools")}
        return {**out, "tool_calls": self.tools.total, "tool_well_formed": self.tools.well_formed}


def live(beats: list[Heartbeat], now: float) -> list[Heartbeat]:
    """Beats of processes that are up: not stopped, and beating within three intervals."""
    return [b for b in beats if b.state != "stopped" and now - b.beat_at <= b.silence_limit_s]


def counts(beats: list[Heartbeat], cfg: RunConfig) -> Counts:
    """Sum what the live heartbeats say."""
    ready: dict[str, int] = {}
    for b in beats:
        ready[b.kind] = ready.get(b.kind, 0) + (b.state == "ready")
    wanted = {k: n for k, n in cfg.actors.count.items() if n}
    waiting = tuple(sorted(k for k, n in wanted.items() if ready.get(k, 0) < n))

    def total(kinds: tuple[str, ...], gauge: str) -> int:
        return int(sum(b.stats.get(gauge, 0.0) for b in beats if b.kind in kinds))

    def one(kind: str, gauge: str, default: float) -> int:
        values = [b.stats[gauge] for b in beats if b.kind == kind and gauge in b.stats]
        return int(max(values)) if values else int(default)

    gates = ("sampler", "evaluator")
    return Counts(
        ready=sum(min(ready.get(k, 0), n) for k, n in wanted.items()),
        expected=sum(wanted.values()), waiting=waiting,
        gated=total(gates, g.GATE_DONE), gate_total=total(gates, g.GATE_TOTAL),
        judged=sum(b.processed for b in beats if b.kind == "judge"),
        round_version=one("evaluator", g.ROUND_VERSION, -1),
        round_judged=one("evaluator", g.ROUND_JUDGED, 0),
        round_size=one("evaluator", g.ROUND_SIZE, 0),
        round_reported=one("evaluator", g.ROUND_REPORTED, -1),
        step=one("learner", g.LEARNER_STEP, 0),
        held_attempts=one("learner", g.LEARNER_HELD, 0),
        waiting_for_round=one("learner", g.LEARNER_WAITING_FOR_ROUND, -1),
        sandbox_cpu_s=round(sum(b.stats.get(g.SANDBOX_CPU_S, 0.0) for b in beats), 1),
        tools=tally(b.stats for b in beats if b.kind == "judge"))


def duration(seconds: float) -> str:
    """4m12s, 1h03m, 42s."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def describe(c: Counts, cfg: RunConfig, elapsed_s: float, trained: str = "") -> str:
    """The line: elapsed time, then each thing going on now, then the latest figures."""
    parts = []
    if c.waiting:
        parts.append(f"starting: {c.ready}/{c.expected} actors ready (waiting for "
                     f"{', '.join(c.waiting)})")
    if c.gate_total and c.gated < c.gate_total:
        parts.append(f"gating {c.gated}/{c.gate_total} tasks")
    if c.round_version >= 0 and c.round_reported < c.round_version:
        parts.append(f"held-out round at version {c.round_version}: "
                     f"{c.round_judged}/{c.round_size} attempts")
    if cfg.actors.count.get("learner"):
        total = cfg.training.max_steps or "∞"
        if c.waiting_for_round >= 0:
            parts.append(f"step {c.step}/{total} done, waiting for the held-out round at "
                         f"version {c.waiting_for_round}")
        elif not (cfg.training.max_steps and c.step >= cfg.training.max_steps):
            parts.append(f"step {c.step + 1}/{total}: {c.held_attempts}/"
                         f"{cfg.training.batch_size} attempts")
    elif c.judged:
        parts.append(f"{c.judged} attempts judged")
    if trained:
        parts.append(trained)
    if c.tools.total:
        parts.append(c.tools.text())
    return f"{duration(elapsed_s)}  " + (" | ".join(parts) if parts else "running")
