"""`whet up` and `whet doctor`: check this machine for a config's actors, then start the stack.

Consumes a config file; produces a run directory and a running stack (in this process, or
detached in the background once it is ready), or one line per missing thing and exit 1.
With `[warmstart] enabled` the warm start trains first (`runtime.stack.warmstart`). What
runs is `runtime.stack.serve`; what is checked is `runtime.stack.preflight`.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import anyio
import typer

from bus.errors import WhetError
from runtime import config as config_mod
from runtime import log as log_mod
from runtime.cli.options import friendly
from runtime.stack import preflight, rundir, warmstart
from runtime.stack import serve as stack

@friendly
def up(
    config: Annotated[Path, typer.Option("--config", "-c", help="Config file.")] = Path("configs/default.toml"),
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Run in the background.")] = False,
    run_dir: Annotated[Optional[Path], typer.Option("--run-dir", hidden=True)] = None,
) -> None:
    """Start the stack: the embedded nats-server (unless a URL is set) and every actor.
    Checks first what the configured actors need from this machine (`whet doctor`), and
    starts nothing while anything is missing."""
    cfg = config_mod.load(config)
    if run_dir is None:  # a detached stack's parent checked already
        refuse_if_unready(cfg)
    rd = rundir.RunDir(run_dir.resolve()) if run_dir else rundir.create(cfg)
    if detach:
        _detach(rd, cfg.warmstart.enabled)
        return
    log_mod.configure(kind="supervisor", instance="supervisor", run_id=rd.run_id,
                      level=cfg.logging.level, run_dir=rd.path)
    typer.echo(f"run {rd.run_id}: {rd.path}", err=True)
    cfg = warmstart.prepare(cfg, rd)
    anyio.run(stack.serve, cfg, rd)


def refuse_if_unready(cfg: config_mod.RunConfig) -> None:
    """Exit with status 1 and one line per problem when this machine cannot run `cfg`."""
    problems = anyio.run(preflight.check, cfg)
    for problem in problems:
        typer.echo(f"whet: {problem.line()}", err=True)
    if problems:
        raise typer.Exit(1)


@friendly
def doctor(config: Annotated[Path, typer.Option("--config", "-c", help="Config file.")] = Path("configs/default.toml")) -> None:
    """Check what the config's actors need from this machine, as `whet up` does first."""
    cfg = config_mod.load(config)
    refuse_if_unready(cfg)
    kinds = " ".join(f"{k}={n}" for k, n in cfg.actors.count.items() if n)
    typer.echo(f"whet doctor: {config} can start here ({kinds})")


def _detach(rd: rundir.RunDir, warm: bool) -> None:
    out = open(rd.path / "stack.out", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", "up", "--config", str(rd.config_file),
         "--run-dir", str(rd.path)],
        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    # A warm start trains first (minutes): the stack's 120 s count from when it is done.
    deadline = None if warm else time.monotonic() + 120
    if warm:
        typer.echo(f"run {rd.run_id}: warm start first; see {rd.path / 'stack.out'}", err=True)
    while not (rd.path / "ready").exists():
        if deadline is None and (rd.path / "warmstart" / "sft.json").exists():
            deadline = time.monotonic() + 120
        if proc.poll() is not None or (deadline is not None and time.monotonic() > deadline):
            raise WhetError(f"stack did not start; see {rd.path / 'stack.out'}")
        time.sleep(0.1)
    typer.echo(f"run {rd.run_id} is up at {rd.url()} (pid {proc.pid}); stop it with 'whet down'")


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(doctor)
