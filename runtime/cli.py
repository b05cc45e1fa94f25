"""The `whet` command line: start, stop, scale, inspect and follow a stack.

Consumes command-line arguments, config files and a run directory (or `--url` /
`WHET_NATS_URL`); produces a running stack, KV scale targets, and text or JSON on stdout.
Errors from bad input exit with status 2 and one line naming what was wrong and where.
Domain commands (exec, judge, redteam, tasks, trace, export, review) register themselves from their own
modules through `COMMAND_MODULES`.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Callable, Optional

import anyio
import msgspec
import typer

from bus import subjects
from bus.errors import WhetError
from bus.messages import ActorFailure, Event, ScaleTarget
from bus.nats_bus import Bus, local_identity
from runtime import config as config_mod
from runtime import log as log_mod
from runtime import status as status_mod, tail as tail_mod
from runtime.connect import bus_settings
from runtime.stack import rundir
from runtime.stack import serve as stack
from runtime.terminal import terminal

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="whetstone: RL post-training on verifiable tasks, as actors on NATS.")

COMMAND_MODULES: list[str] = ["runtime.cli_auth", "runtime.cli_trace", "runtime.cli_exec",
                             "runtime.cli_judge", "runtime.cli_redteam", "runtime.cli_tasks",
                             "runtime.cli_compose", "runtime.cli_review"]
"Modules with a `register(app)` function that adds their commands."

RunOpt = Annotated[Optional[str], typer.Option("--run", help="Run id or path (default: runs/latest).")]
UrlOpt = Annotated[Optional[str], typer.Option("--url", help="NATS URL (default: WHET_NATS_URL, then the run's).")]


def friendly(fn: Callable) -> Callable:
    """Turn whetstone's own errors into one clear line on stderr and exit status 2 (1 for a
    stack that stopped because an actor kind kept failing)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except WhetError as exc:
            terminal().line(f"whet: {exc}")
            raise typer.Exit(getattr(exc, "exit_code", 2)) from None

    return wrapper


def connect_url(run: str | None, url: str | None) -> str:
    """The URL a client command should use."""
    return url or os.environ.get("WHET_NATS_URL") or rundir.find(run).url()


async def open_bus(run: str | None, url: str | None) -> Bus:
    """Connect a short-lived CLI client with the run's settings (or defaults)."""
    from runtime.stack import credentials

    target = connect_url(run, url)
    cfg, rd = config_mod.RunConfig(), None
    try:
        rd = rundir.find(run)
        cfg = config_mod.load(rd.config_file)
    except WhetError:
        pass
    settings = credentials.as_admin(bus_settings(cfg, target), cfg,
                                    credentials.secrets_dir(cfg, rd))
    settings = type(settings)(**{**settings.__dict__, "connect_timeout_s": 10.0,
                                 "publish_deadline_s": 15.0})
    return await Bus.connect(settings, local_identity("cli"))


@app.command()
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
        _detach(rd)
        return
    log_mod.configure(kind="supervisor", instance="supervisor", run_id=rd.run_id,
                      level=cfg.logging.level, run_dir=rd.path)
    typer.echo(f"run {rd.run_id}: {rd.path}", err=True)
    anyio.run(stack.serve, cfg, rd)


def refuse_if_unready(cfg: config_mod.RunConfig) -> None:
    """Exit with status 1 and one line per problem when this machine cannot run `cfg`."""
    from runtime.stack import preflight

    problems = anyio.run(preflight.check, cfg)
    for problem in problems:
        typer.echo(f"whet: {problem.line()}", err=True)
    if problems:
        raise typer.Exit(1)


@app.command()
@friendly
def doctor(config: Annotated[Path, typer.Option("--config", "-c", help="Config file.")] = Path("configs/default.toml")) -> None:
    """Check what the config's actors need from this machine, as `whet up` does first."""
    cfg = config_mod.load(config)
    refuse_if_unready(cfg)
    kinds = " ".join(f"{k}={n}" for k, n in cfg.actors.count.items() if n)
    typer.echo(f"whet doctor: {config} can start here ({kinds})")


def _detach(rd: rundir.RunDir) -> None:
    out = open(rd.path / "stack.out", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", "up", "--config", str(rd.config_file),
         "--run-dir", str(rd.path)],
        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (rd.path / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise WhetError(f"stack did not start; see {rd.path / 'stack.out'}")
        time.sleep(0.1)
    typer.echo(f"run {rd.run_id} is up at {rd.url()} (pid {proc.pid}); stop it with 'whet down'")


@app.command()
@friendly
def down(run: RunOpt = None,
         timeout: Annotated[float, typer.Option(help="Seconds to wait for a graceful stop.")] = 60.0) -> None:
    """Stop the stack gracefully: actors drain or give back their work, nothing is lost."""
    from runtime.broker.embedded import stop_pid

    rd = rundir.find(run)
    pid = rd.supervisor_pid()
    if pid is None:
        typer.echo(f"run {rd.run_id} is not running")
        return
    if not stop_pid(pid, timeout):
        raise WhetError(f"run {rd.run_id} (pid {pid}) did not stop within {timeout:.0f} s")
    typer.echo(f"run {rd.run_id} stopped")


@app.command()
@friendly
def scale(
    targets: Annotated[list[str], typer.Argument(help="KIND=N pairs, e.g. executor=4.")],
    run: RunOpt = None, url: UrlOpt = None,
    wait: Annotated[float, typer.Option(help="Seconds to wait for the new count (0: don't).")] = 60.0,
) -> None:
    """Change actor counts while the stack runs."""
    wanted = {}
    for item in targets:
        kind, sep, count = item.partition("=")
        if not sep or not count.isdigit():
            raise WhetError(f"scale: {item!r}: expected KIND=N, e.g. executor=4")
        wanted[kind] = int(count)

    async def go() -> None:
        bus = await open_bus(run, url)
        try:
            for kind, count in wanted.items():
                await bus.kv_put(subjects.BUCKET_RUN, subjects.scale_key(kind),
                                 ScaleTarget(kind=kind, count=count, requested_at=time.time()))
            typer.echo("requested " + " ".join(f"{k}={v}" for k, v in wanted.items()))
            if wait <= 0:
                return
            with anyio.move_on_after(wait):
                while True:
                    snap = await status_mod.gather(bus)
                    if all(snap.live(k) == n for k, n in wanted.items()):
                        typer.echo("running " + " ".join(f"{k}={snap.live(k)}" for k in wanted))
                        return
                    await anyio.sleep(0.5)
            raise WhetError(f"scale: counts not reached within {wait:.0f} s; see 'whet status'")
        finally:
            await bus.close()

    anyio.run(go)


@app.command()
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
            return await status_mod.gather(bus, include_stopped=all_actors)
        finally:
            await bus.close()

    snap = anyio.run(go)
    if as_json:
        typer.echo(json.dumps(snap.as_dict(), indent=2))
        return
    from runtime.render import render_status

    render_status(snap, every_gauge=every_gauge)


def _status_of_a_stopped_run(rd: rundir.RunDir, as_json: bool) -> None:
    """A run whose stack stopped because a kind kept failing: say so from the run directory
    (its embedded server is gone with it), and exit 1. Other runs: return."""
    if rd.supervisor_pid() is not None or not rd.failure_file.is_file():
        return
    failure = msgspec.json.decode(rd.failure_file.read_bytes(), type=ActorFailure)
    if as_json:
        typer.echo(json.dumps({"run_id": rd.run_id, "running": False,
                               "failing": [status_mod.failing_dict(failure)]}, indent=2))
    else:
        from rich.console import Console

        from runtime.render import render_failing

        typer.echo(f"run {rd.run_id} is not running: it stopped because a kind kept failing")
        render_failing([failure], Console(width=150))
    raise typer.Exit(1)


@app.command()
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


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


if __name__ == "__main__":
    app()
