"""`whet tail`: follow a run's events stream, filtered (`runtime.cli.tail_filter`).

Consumes a run or URL and the filter options; replays `Event`s from the events stream
(read-only, nothing is acked) and prints one line each, pretty on a terminal and JSON
otherwise. It does not write to the bus.
"""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import anyio
import typer

from bus import subjects
from bus.errors import WhetError
from bus.messages import Event
from runtime.cli import tail_filter as tail_mod
from runtime.cli.options import RunOpt, UrlOpt, friendly, open_bus

@friendly
def tail(
    run: RunOpt = None, url: UrlOpt = None,
    actor: Annotated[Optional[str], typer.Option(help="Only this actor kind.")] = None,
    event: Annotated[Optional[str], typer.Option(help="Only events matching this glob, e.g. 'message.*'.")] = None,
    level: Annotated[str, typer.Option(help="Lowest level: debug, info, warning, error.")] = "debug",
    since: Annotated[Optional[str], typer.Option(help="Start this long ago (30s, 5m, 2h) or at an ISO time.")] = "10m",
    as_json: Annotated[Optional[bool], typer.Option("--json/--pretty", help="JSON lines (default when not a terminal).")] = None,
    follow: Annotated[bool, typer.Option("--follow/--no-follow", help="Keep following new events.")] = True,
) -> None:
    """Follow the structured events stream."""
    if level not in tail_mod.LEVELS:
        raise WhetError(f"tail: --level {level!r}: expected one of {list(tail_mod.LEVELS)}")
    try:
        start = tail_mod.parse_since(since)
    except ValueError as exc:
        raise WhetError(f"tail: {exc}") from None
    flt = tail_mod.TailFilter(actor=actor, event_glob=event, level=level)
    json_lines = as_json if as_json is not None else not sys.stdout.isatty()
    fmt = tail_mod.as_json if json_lines else tail_mod.as_text

    async def go() -> None:
        bus = await open_bus(run, url)
        try:
            async for _, ev, _ in bus.replay(subjects.STREAM_EVENTS, subjects.event_filter(actor),
                                             Event, since=start, follow=follow):
                if ev is not None and flt.accepts(ev):
                    typer.echo(fmt(ev))
        finally:
            await bus.close()

    try:
        anyio.run(go)
    except KeyboardInterrupt:
        pass


def register(app: typer.Typer) -> None:
    app.command()(tail)
