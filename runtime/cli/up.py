"""`whet up` and `whet doctor`: check this machine for a config's actors, then start the stack.

Consumes a config file; produces a run directory and a running stack (in this process, or
detached in the background once it is ready), or one line per missing thing and exit 1.
A stack that stops on an error ends with its exception's last line (kept in the run's
`supervisor.cause`) and exit 1, and leaves no `supervisor.pid` or `ready` behind.
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
import structlog
import typer

from bus.errors import StackStopped, WhetError
from runtime import config as config_mod
from runtime import log as log_mod
from runtime.cli.options import friendly
from runtime.stack import crash_cause, preflight, rundir, stop_cause, warmstart
from runtime.stack import serve as stack

log = structlog.get_logger("runtime.cli.up")

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
    _supervise(cfg, rd)


def _supervise(cfg: config_mod.RunConfig, rd: rundir.RunDir) -> None:
    """Run the stack in this process; on every way out remove `supervisor.pid` and `ready`,
    and on an error keep its last line in `supervisor.cause` and raise it as one line."""
    if not rd.cause_file.exists():  # a detached stack's parent reserved it
        stop_cause.reserve(rd.cause_file)
    try:
        anyio.run(stack.serve, warmstart.prepare(cfg, rd), rd)
    except WhetError as exc:
        stop_cause.record(rd.cause_file, str(exc))
        raise
    except Exception as exc:
        line = stop_cause.line_of(exc)
        stop_cause.record(rd.cause_file, line)
        log.exception("stack.crashed", cause=line)
        raise StackStopped(f"the stack stopped on an error: {line} "
                           f"(traceback: {rd.path / 'logs' / 'supervisor.jsonl'})") from None
    finally:
        rd.remove_live_files()
        stop_cause.release(rd.cause_file)


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
    stop_cause.reserve(rd.cause_file)  # while the disk has room for it
    out_path = rd.path / "stack.out"
    out = open(out_path, "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", "up", "--config", str(rd.config_file),
         "--run-dir", str(rd.path)],
        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    # A warm start trains first (minutes): the stack's 120 s count from when it is done.
    deadline = None if warm else time.monotonic() + 120
    if warm:
        typer.echo(f"run {rd.run_id}: warm start first; see {out_path}", err=True)
    while not ((rd.path / "ready").exists() and proc.poll() is None):
        if deadline is None and (rd.path / "warmstart" / "sft.json").exists():
            deadline = time.monotonic() + 120
        if proc.poll() is not None:
            raise StackStopped(_stopped_before_ready(rd, out_path))
        if deadline is not None and time.monotonic() > deadline:
            raise WhetError(f"stack did not start within 120 s; see {out_path}")
        time.sleep(0.1)
    typer.echo(f"run {rd.run_id} is up at {rd.url()} (pid {proc.pid}); stop it with 'whet down'")


def _stopped_before_ready(rd: rundir.RunDir, out_path: Path) -> str:
    """One line for a detached supervisor that exited before it was ready: its recorded
    cause, else its output's last exception line; stale files of a killed one removed."""
    stale = rd.clear_stale()
    cause = stop_cause.read(rd.cause_file) or crash_cause.from_output(out_path)
    return (f"the stack stopped before it was ready: {cause or 'no cause recorded'}"
            + (f" (its supervisor.pid was stale: {stale}; removed it and ready)" if stale else "")
            + f"; see {out_path}")


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(doctor)
