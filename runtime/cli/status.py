"""`whet status`: a running stack's actors, queues, policy version and failing kinds.

Consumes a run or URL; produces tables (`runtime.cli.render`) or JSON of the snapshot that
`runtime.cli.stack_status` reads from the bus. A run whose stack stopped (its supervisor is
gone, and with it the embedded server), or stopped because a kind kept failing, is reported
from its run directory in one line, with exit status 1: with the cause when its supervisor
stopped on an error, and with its stale files removed when it was killed before it could
remove them. It changes nothing.
"""

from __future__ import annotations

import json
import os
from typing import Annotated

import anyio
import msgspec
import typer
from rich.console import Console

from bus.errors import WhetError
from bus.messages import ActorFailure
from runtime import config as config_mod
from runtime.cli import stack_status as status_mod
from runtime.cli.options import RunOpt, UrlOpt, friendly, open_bus
from runtime.cli.render import render_failing, render_status
from runtime.stack import rundir, stop_cause

@friendly
def status(run: RunOpt = None, url: UrlOpt = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
           all_actors: Annotated[bool, typer.Option("--all", help="Include stopped actors.")] = False,
           every_gauge: Annotated[bool, typer.Option("--gauges", help="Show every actor gauge.")] = False) -> None:
    """Actors and heartbeats, queue depths and redeliveries, policy version, throughput,
    and kinds failing with their cause."""
    if not (url or os.environ.get("WHET_NATS_URL")):
        _status_of_a_stopped_run(rundir.find(run), as_json)

    async def go() -> status_mod.StackStatus:
        bus = await open_bus(run, url)
        try:
            return await status_mod.gather_patiently(bus, include_stopped=all_actors)
        finally:
            await bus.close()

    snap = anyio.run(go)
    if as_json:
        typer.echo(json.dumps(snap.as_dict(), indent=2))
        return
    render_status(snap, every_gauge=every_gauge)


def _status_of_a_stopped_run(rd: rundir.RunDir, as_json: bool) -> None:
    """A run whose stack stopped: say so from the run directory (its embedded server is gone
    with it; why, if a kind kept failing), and exit 1. Running runs, and runs on a server of
    their own (`[bus] url`, which may outlive the supervisor): return."""
    if rd.supervisor_pid() is not None:
        return
    stale, cause = rd.clear_stale(), stop_cause.read(rd.cause_file)
    if not rd.failure_file.is_file() and (stale or cause):
        _say_how_it_stopped(rd, stale, cause, as_json)
    if not rd.failure_file.is_file():
        try:
            external = bool(config_mod.load(rd.config_file).bus.url)
        except WhetError:
            return
        if external:
            return
        if as_json:
            typer.echo(json.dumps({"run_id": rd.run_id, "running": False, "failing": []}, indent=2))
        else:
            typer.echo(f"run {rd.run_id} is not running (its stack and embedded server stopped); "
                       "start one with 'whet up'")
        raise typer.Exit(1)
    failure = msgspec.json.decode(rd.failure_file.read_bytes(), type=ActorFailure)
    if as_json:
        typer.echo(json.dumps({"run_id": rd.run_id, "running": False,
                               "failing": [status_mod.failing_dict(failure)]}, indent=2))
    else:
        typer.echo(f"run {rd.run_id} is not running: it stopped because a kind kept failing")
        render_failing([failure], Console(width=150))
    raise typer.Exit(1)


def _say_how_it_stopped(rd: rundir.RunDir, stale: str, cause: str, as_json: bool) -> None:
    """One line for a supervisor that stopped on an error (`cause`) or was killed before it
    cleaned up (`stale`: its files are removed by now), and exit 1."""
    parts = [f"its supervisor stopped on an error: {cause}"] if cause else []
    if stale:
        parts.append(f"its supervisor.pid was stale ({stale}); removed it and ready")
    if as_json:
        typer.echo(json.dumps({"run_id": rd.run_id, "running": False, "failing": [],
                               "cause": cause, "stale": stale}, indent=2))
    else:
        typer.echo(f"run {rd.run_id} is not running: " + "; ".join(parts))
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(status)
