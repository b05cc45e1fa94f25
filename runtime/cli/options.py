"""What the verbs share: the `--run` and `--url` options, the error wrapper and the bus client.

Consumes a run id or path, a URL (or `WHET_NATS_URL`) and the run's config; produces a
connected short-lived CLI client (`open_bus`, logged in as `admin`) and `friendly`, which
turns whetstone's own errors into one line and exit status 2. It registers no command.
"""

from __future__ import annotations

import functools
import os
from typing import Annotated, Callable, Optional

import typer

from bus.errors import WhetError
from bus.nats_bus import Bus, local_identity
from runtime import config as config_mod
from runtime.connect import bus_settings
from runtime.stack import credentials, rundir
from runtime.terminal import terminal

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
