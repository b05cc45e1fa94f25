"""`whet down`: stop a run's stack gracefully (its actors drain or give back their work).

Consumes a run id or path; signals the run's supervisor and waits for it to exit. It
signals only the process its `supervisor.pid` proves to be this run's (pid, start time and
run id, `runtime.stack.pidfile`): a stale file is reported and removed, and nothing is
signalled; a supervisor that stopped on an error is named with its cause
(`runtime.stack.stop_cause`). It touches no bus: the supervisor stops its actors and its embedded server.
"""

from __future__ import annotations

from typing import Annotated

import typer

from bus.errors import WhetError
from runtime.cli.options import RunOpt, friendly
from runtime.stack import pidfile, rundir, stop_cause

@friendly
def down(run: RunOpt = None,
         timeout: Annotated[float, typer.Option(help="Seconds to wait for a graceful stop.")] = 60.0) -> None:
    """Stop the stack gracefully: actors drain or give back their work, nothing is lost."""
    rd = rundir.find(run)
    found = rd.supervisor()
    cause = stop_cause.read(rd.cause_file)
    because = f"; it had stopped on an error: {cause}" if cause else ""
    if found.stale:  # `found` already read the pid file: no second look (`clear_stale`)
        rd.remove_live_files()
        typer.echo(f"run {rd.run_id} is not running: its supervisor.pid was stale ({found.stale}); "
                   f"removed it and signalled nothing{because}")
        return
    if found.record is None:
        typer.echo(f"run {rd.run_id} is not running{because}")
        return
    if not pidfile.stop(found.record, timeout):
        raise WhetError(f"run {rd.run_id} (pid {found.record.pid}) did not stop within {timeout:.0f} s")
    typer.echo(f"run {rd.run_id} stopped")


def register(app: typer.Typer) -> None:
    app.command()(down)
