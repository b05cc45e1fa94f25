"""`whet down`: stop a run's stack gracefully (its actors drain or give back their work).

Consumes a run id or path; signals the run's supervisor and waits for it to exit. It
touches no bus: the supervisor stops its actors and its embedded server itself.
"""

from __future__ import annotations

from typing import Annotated

import typer

from bus.errors import WhetError
from runtime.broker.embedded import stop_pid
from runtime.cli.options import RunOpt, friendly
from runtime.stack import rundir

@friendly
def down(run: RunOpt = None,
         timeout: Annotated[float, typer.Option(help="Seconds to wait for a graceful stop.")] = 60.0) -> None:
    """Stop the stack gracefully: actors drain or give back their work, nothing is lost."""
    rd = rundir.find(run)
    pid = rd.supervisor_pid()
    if pid is None:
        typer.echo(f"run {rd.run_id} is not running")
        return
    if not stop_pid(pid, timeout):
        raise WhetError(f"run {rd.run_id} (pid {pid}) did not stop within {timeout:.0f} s")
    typer.echo(f"run {rd.run_id} stopped")


def register(app: typer.Typer) -> None:
    app.command()(down)
