"""`whet setup` and `whet actor KIND`: a stack whose processes a container engine runs.

Under docker compose no supervisor exists: `whet setup` (a one-shot service, logged in as
admin) creates the streams, buckets and object store on the external NATS server and
records the run; then each container runs one actor in its foreground process with
`whet actor KIND` until SIGTERM, when it drains or gives back its work like a supervised
actor. The engine restarts, scales and stops containers; `docker compose logs` shows each
actor's JSON log lines, and `whet tail` the same events from the bus.

Consumes a config file (the bus URL must be set: there is no embedded server here) and the
credential variables of `runtime.connect`; the run id is `WHET_RUN_ID` or `[run] name`, so
a stack brought down and up again continues the same run. It does no domain work.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Annotated, Optional

import anyio
import msgspec
import structlog
import typer

from bus import subjects
from bus.errors import ConfigError
from bus.nats_bus import Bus, Identity
from runtime import config as config_mod
from runtime import log as log_mod
from runtime.cli.options import friendly
from runtime.connect import bus_settings, topology
from runtime.stack import actor as actor_main, credentials

log = structlog.get_logger("runtime.compose")
ConfigOpt = Annotated[Path, typer.Option("--config", "-c", envvar="WHET_CONFIG", help="Config file.")]
DEFAULT_CONFIG = Path("/etc/whetstone/config.toml")
"Where docker-compose.yml mounts the stack's config in every container."
SETUP_TIMEOUT_S = 60.0


def run_id_of(cfg: config_mod.RunConfig) -> str:
    """The run a containerised stack belongs to: WHET_RUN_ID, else the config's run name."""
    return os.environ.get("WHET_RUN_ID") or cfg.run.name


def load_external(config: Path) -> config_mod.RunConfig:
    """The config, which must name a NATS URL (config or WHET_NATS_URL)."""
    cfg = config_mod.load(config)
    if not cfg.bus.url:
        raise ConfigError(str(config), "bus.url",
                          "a containerised stack needs the NATS URL (or WHET_NATS_URL)")
    return cfg


async def prepare_bus(cfg: config_mod.RunConfig, run_id: str) -> list[str]:
    """Create the topology and record the run (id and resolved config); the stream names."""
    secrets = credentials.secrets_dir(cfg, None)
    settings = credentials.as_admin(bus_settings(cfg, cfg.bus.url), cfg, secrets)
    bus = await Bus.connect(settings, Identity("setup", f"setup-{socket.gethostname()}", run_id))
    try:
        specs = topology(cfg)
        with anyio.fail_after(SETUP_TIMEOUT_S):
            await bus.ensure_topology(specs)
            await bus.kv_put_bytes(subjects.BUCKET_RUN, "run.id", run_id.encode())
            await bus.kv_put_bytes(subjects.BUCKET_RUN, "run.config", msgspec.json.encode(cfg))
        return [spec.name for spec in specs]
    finally:
        await bus.close()


def register(app: typer.Typer) -> None:
    @app.command()
    @friendly
    def setup(config: ConfigOpt = DEFAULT_CONFIG) -> None:
        """Create streams, buckets and the run record on an external NATS server (compose)."""
        cfg = load_external(config)
        run_id = run_id_of(cfg)
        streams = anyio.run(prepare_bus, cfg, run_id)
        typer.echo(f"run {run_id}: {len(streams)} streams ready at {cfg.bus.url}")

    @app.command()
    @friendly
    def actor(
        kind: Annotated[str, typer.Argument(help="Actor kind, e.g. executor.")],
        config: ConfigOpt = DEFAULT_CONFIG,
        instance: Annotated[Optional[str], typer.Option(
            help="Instance name (default: KIND-<hostname>, unique per container).")] = None,
        ready_file: Annotated[Path, typer.Option(
            help="Touched at each heartbeat while serving, for health checks.")] = Path("/tmp/whet-ready"),
    ) -> None:
        """Run one actor in this process until SIGTERM (a container's command)."""
        cfg = load_external(config)
        actor_main.resolve_target(kind, cfg)  # an unknown kind fails here, clearly
        name = instance or f"{kind}-{socket.gethostname()}"
        run_id = run_id_of(cfg)
        actor_main.limit_threads(cfg.supervisor.threads.get(kind, cfg.supervisor.threads_per_actor))
        log_mod.configure(kind=kind, instance=name, run_id=run_id, level=cfg.logging.level)
        ready_file.unlink(missing_ok=True)
        started = time.monotonic()
        try:
            anyio.run(lambda: actor_main.serve(kind, name, cfg, cfg.bus.url, "",
                                               run_id=run_id, ready_file=ready_file))
        except KeyboardInterrupt:
            pass
        except Exception:
            log.exception("actor.crashed")
            raise typer.Exit(1) from None
        typer.echo(f"{name} stopped after {time.monotonic() - started:.0f} s", err=True)
