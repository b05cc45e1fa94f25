"""Terminal rendering of `whet status` (rich tables).

Consumes a `StackStatus`; produces tables on stdout. No I/O beyond printing. Above
`ACTOR_ROWS_MAX` actors it draws one row per kind and lists only the actors that are not
ready (`whet status --json` lists every one).
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from bus import gauges as gauge_names
from bus.messages import ActorFailure
from runtime.cli.render_metrics import render_metrics
from runtime.cli.stack_status import ActorRow, StackStatus
from runtime.stack.render_round import round_line, rung_text

_KEY_GAUGES = (gauge_names.GENERATOR_TOKENS_PER_S, gauge_names.EXECUTOR_JOBS_PER_S,
               gauge_names.LEARNER_STEP_TIME_S, gauge_names.SAMPLER_REPAIR_TASKS)

_STATE_STYLE = {"ready": "green", "starting": "yellow", "stopping": "yellow",
                "dead": "bold red", "stopped": "dim"}

ACTOR_ROWS_MAX = 40
"""Most actors drawn one row each. rich draws a table row in milliseconds: 1,000 actors took
5 s on an idle core and 50 s on a busy one (bench/scale/scale.py), and scrolled away."""


@dataclass
class KindRow:
    """The actors of one kind, added up."""

    kind: str
    instances: int
    states: dict[str, int]
    processed: int
    in_flight: int
    per_s: float
    oldest_beat_s: float


def kind_rows(actors: list[ActorRow]) -> list[KindRow]:
    """One row per kind: how many instances in which state, their work and oldest beat."""
    out: dict[str, KindRow] = {}
    for a in actors:
        row = out.setdefault(a.kind, KindRow(a.kind, 0, Counter(), 0, 0, 0.0, 0.0))
        row.instances += 1
        row.states[a.state] += 1
        row.processed += a.processed
        row.in_flight += a.in_flight
        row.per_s += a.per_s
        row.oldest_beat_s = max(row.oldest_beat_s, a.beat_age_s)
    return sorted(out.values(), key=lambda r: r.kind)


def gauge_text(stats: dict[str, float], every: bool) -> str:
    """The shared throughput gauges (or, with `every`, all of them) as 'name=value' pairs."""
    keys = sorted(stats) if every else [k for k in _KEY_GAUGES if k in stats]
    text = " ".join(f"{k}={stats[k]:g}" for k in keys)
    hidden = len(stats) - len(keys)
    more = f"(+{hidden} more: --gauges)" if hidden and not every else ""
    return " ".join(x for x in (text, more) if x)


def render_failing(failing: list[ActorFailure], console: Console) -> None:
    """One red line per failing kind: what, how often, why, and where the traceback is."""
    for f in failing:
        console.print(f"[bold red]failing[/] {f.kind} ({f.instance}): crashed {f.failures} times "
                      f"in a row before it was ready: {f.cause}  [dim](log: {f.log})[/]",
                      markup=True, highlight=False, soft_wrap=True)


def render_status(snap: StackStatus, console: Console | None = None, *,
                  every_gauge: bool = False) -> None:
    # Not a terminal (a pipe, a log): wide enough that rows do not wrap into columns of dots.
    console = console or Console(width=max(shutil.get_terminal_size().columns, 150))
    title = f"actors (policy version {snap.policy_version})"
    if len(snap.actors) <= ACTOR_ROWS_MAX:
        console.print(actor_table(title, snap.actors, every_gauge))
    else:
        console.print(kind_table(title, kind_rows(snap.actors)))
        unready = [a for a in snap.actors if a.state != "ready"]
        if unready:
            console.print(actor_table("actors not ready", unready[:ACTOR_ROWS_MAX], every_gauge))
        more = len(unready) - ACTOR_ROWS_MAX
        console.print(f"{len(snap.actors)} actors: one row per kind"
                      + (f", and {more} more not ready" if more > 0 else "")
                      + "; `whet status --json` lists every actor", highlight=False)
    render_failing(snap.failing, console)
    streams = Table(title=f"queues (dead letters: {snap.dead_letters})", title_justify="left")
    for col in ("stream", "stored", "consumer", "pending", "in flight", "redelivered"):
        streams.add_column(col, justify="left" if col in ("stream", "consumer") else "right")
    for s in snap.streams:
        streams.add_row(s.stream, str(s.messages), s.consumer or "-", str(s.pending),
                        str(s.in_flight), str(s.redelivered))
    console.print(streams)
    if snap.tools.total:
        console.print(snap.tools.text(), highlight=False, soft_wrap=True)
    if snap.heldout is not None:
        console.print(f"held-out: {round_line(snap.heldout)}", highlight=False)
        if snap.heldout.rungs:
            console.print(f"held-out by rung: {rung_text(snap.heldout)}", highlight=False,
                          soft_wrap=True)
    if snap.metrics is not None:
        render_metrics(snap.metrics, console, now=snap.at)


def actor_table(title: str, actors: list[ActorRow], every_gauge: bool) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("kind", "instance", "pid", "state", "beat", "uptime", "done", "held", "per s",
                "version", "gauges"):
        table.add_column(col, justify="right" if col in ("pid", "done", "held", "per s") else "left")
    for a in actors:
        style = _STATE_STYLE.get(a.state, "")
        gauges = gauge_text(a.stats, every_gauge)
        table.add_row(a.kind, a.instance, str(a.pid), f"[{style}]{a.state}[/]",
                      f"{a.beat_age_s:.1f}s ago", f"{a.uptime_s:.0f}s", str(a.processed),
                      str(a.in_flight), f"{a.per_s:.2f}",
                      str(a.policy_version) if a.policy_version >= 0 else "-", gauges)
    return table


def kind_table(title: str, rows: list[KindRow]) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("kind", "instances", "states", "oldest beat", "done", "held", "per s"):
        table.add_column(col, justify="left" if col in ("kind", "states") else "right")
    for r in rows:
        states = " ".join(f"[{_STATE_STYLE.get(k, '')}]{k}[/]={v}" for k, v in sorted(r.states.items()))
        table.add_row(r.kind, str(r.instances), states, f"{r.oldest_beat_s:.1f}s ago",
                      str(r.processed), str(r.in_flight), f"{r.per_s:.2f}")
    return table
