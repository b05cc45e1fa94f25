"""Terminal rendering of `whet status` (rich tables).

Consumes a `StackStatus`; produces tables on stdout. No I/O beyond printing.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from runtime.status import StackStatus

_STATE_STYLE = {"ready": "green", "starting": "yellow", "stopping": "yellow",
                "dead": "bold red", "stopped": "dim"}


def render_status(snap: StackStatus, console: Console | None = None) -> None:
    console = console or Console()
    actors = Table(title=f"actors (policy version {snap.policy_version})", title_justify="left")
    for col in ("kind", "instance", "pid", "state", "beat", "uptime", "done", "held", "per s",
                "version", "gauges"):
        actors.add_column(col, justify="right" if col in ("pid", "done", "held", "per s") else "left")
    for a in snap.actors:
        style = _STATE_STYLE.get(a.state, "")
        gauges = " ".join(f"{k}={v:g}" for k, v in sorted(a.stats.items()))
        actors.add_row(a.kind, a.instance, str(a.pid), f"[{style}]{a.state}[/]",
                       f"{a.beat_age_s:.1f}s ago", f"{a.uptime_s:.0f}s", str(a.processed),
                       str(a.in_flight), f"{a.per_s:.2f}",
                       str(a.policy_version) if a.policy_version >= 0 else "-", gauges)
    console.print(actors)
    streams = Table(title=f"queues (dead letters: {snap.dead_letters})", title_justify="left")
    for col in ("stream", "stored", "consumer", "pending", "in flight", "redelivered"):
        streams.add_column(col, justify="left" if col in ("stream", "consumer") else "right")
    for s in snap.streams:
        streams.add_row(s.stream, str(s.messages), s.consumer or "-", str(s.pending),
                        str(s.in_flight), str(s.redelivered))
    console.print(streams)
    if snap.metrics is not None:
        from runtime.render_metrics import render_metrics

        render_metrics(snap.metrics, console, now=snap.at)
