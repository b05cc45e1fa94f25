"""Bring a whole stack up and down: server (embedded or given), topology, supervisor.

Consumes a `RunConfig` and a fresh run directory; produces a running stack whose URL and
supervisor pid are in the run directory, until SIGTERM/SIGINT (`whet down`, Ctrl-C) stops
it gracefully: actors drain, then the embedded server stops. With `[auth]` on, the embedded
server gets per-run users and each actor its role's login (`runtime.credentials`); with
`[autoscale]` kinds, the autoscaler runs beside the supervisor. It does no domain work.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
import msgspec
import structlog

from bus import subjects
from bus.messages import ScaleTarget
from bus.nats_bus import Bus, Identity
from runtime import autoscale, credentials
from runtime.config import RunConfig
from runtime.connect import bus_settings, topology
from runtime.embedded import EmbeddedServer
from runtime.rundir import RunDir
from runtime import progress
from runtime.supervisor import Supervisor

log = structlog.get_logger("runtime.stack")


async def serve(cfg: RunConfig, run_dir: RunDir) -> None:
    """Run the stack in this process until a stop signal (or, training, `max_steps`)."""
    secrets = credentials.secrets_dir(cfg, run_dir)
    server, url = await _start_server(cfg, run_dir, secrets)
    run_dir.url_file.write_text(url + "\n")
    run_dir.pid_file.write_text(f"{os.getpid()}\n")
    from runtime import log as log_mod

    sink = log_mod.sink()
    settings = credentials.as_admin(bus_settings(cfg, url), cfg, secrets)
    bus = await Bus.connect(settings, Identity("supervisor", "supervisor", run_dir.run_id))
    try:
        await bus.ensure_topology(topology(cfg))
        await _record_run(bus, cfg, run_dir)
        supervisor = Supervisor(
            cfg, run_dir, url, bus,
            child_env=lambda kind: credentials.actor_env(kind, cfg, secrets, dict(os.environ)))
        async with anyio.create_task_group() as tg:
            if sink is not None:
                tg.start_soon(sink.forward, bus)
            tg.start_soon(_stop_on_signal, bus)
            await tg.start(supervisor.run)
            if cfg.autoscale.kinds:
                tg.start_soon(autoscale.run_autoscaler, bus, cfg.autoscale, supervisor.counts)
            log.info("stack.ready", run_id=run_dir.run_id, url=url, actors=supervisor.counts())
            (run_dir.path / "ready").write_text(f"{time.time()}\n")
            if cfg.actors.count.get("learner"):
                pids = lambda: supervisor.child_pids() + ([server.pid] if server else [])  # noqa: E731
                tg.start_soon(progress.follow, bus, cfg, run_dir, pids)
            await bus.stopping.wait()
            await supervisor.done.wait()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            log.info("stack.stopped", run_id=run_dir.run_id)
            if sink is not None:
                with anyio.move_on_after(2):
                    await sink.forward_pending(bus)
            await bus.close()
            if server is not None:
                await anyio.to_thread.run_sync(server.stop)
            run_dir.pid_file.unlink(missing_ok=True)
            (run_dir.path / "ready").unlink(missing_ok=True)


async def _start_server(cfg: RunConfig, run_dir: RunDir,
                        secrets: Path | None) -> tuple[EmbeddedServer | None, str]:
    """The embedded server (with per-run users when auth is on), or the configured URL."""
    if cfg.bus.url:
        if secrets is not None:
            credentials.read_passwords(secrets)  # fail now, not in every actor
        return None, cfg.bus.url
    server = EmbeddedServer(run_dir.nats_dir,
                            extra_config=credentials.embedded_server_config(cfg, secrets))
    url = await anyio.to_thread.run_sync(server.start)
    log.info("nats.started", url=url, store=str(run_dir.nats_dir), pid=server.pid,
             auth=cfg.auth.enabled, tls=bool(cfg.auth.tls_cert_file))
    return server, url


async def _stop_on_signal(bus: Bus) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            log.info("stack.stopping")
            bus.stopping.set()
            return


async def _record_run(bus: Bus, cfg: RunConfig, run_dir: RunDir) -> None:
    # Scale targets from an earlier run on the same server would override this config.
    for kind in cfg.actors.count:
        await bus.kv_put(subjects.BUCKET_RUN, subjects.scale_key(kind),
                         ScaleTarget(kind=kind, count=cfg.actors.count[kind],
                                     requested_at=time.time()))
    await bus.kv_put_bytes(subjects.BUCKET_RUN, "run.id", run_dir.run_id.encode())
    await bus.kv_put_bytes(subjects.BUCKET_RUN, "run.config", msgspec.json.encode(cfg))
