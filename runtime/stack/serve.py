"""Bring a whole stack up and down: server (embedded or given), topology, supervisor.

Consumes a `RunConfig` and a fresh run directory; produces a running stack whose URL and
supervisor pid are in the run directory, and a live status line (`runtime.stack.progress`), until
SIGTERM, SIGINT or SIGHUP (`whet down`, Ctrl-C, a closed terminal) stops it gracefully, or a
kind's crash loop does: actors drain, then the embedded server stops, on every way out. With `[auth]` on, the embedded
server gets per-run users and each actor its role's login (`runtime.stack.credentials`); with
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
from bus.errors import ActorFailed
from bus.messages import ActorFailure, ScaleTarget
from bus.nats_bus import Bus, Identity
from runtime.broker.cluster import EmbeddedCluster
from runtime.broker.embedded import EmbeddedServer
from runtime.config import RunConfig
from runtime.connect import bus_settings, topology
from runtime.stack import autoscale, credentials, pidfile
from runtime.stack import progress
from runtime.stack.rundir import RunDir
from runtime.stack.supervisor import Supervisor

log = structlog.get_logger("runtime.stack.serve")


async def serve(cfg: RunConfig, run_dir: RunDir) -> None:
    """Run the stack in this process until a stop signal (or, training, `max_steps`).

    Every way out (a signal, a crash loop, an exception) stops the embedded server last.
    Raises `ActorFailed` when a kind crashed `supervisor.crash_loop_limit` times in a row
    before it was ready (the stack stopped because of it)."""
    secrets = credentials.secrets_dir(cfg, run_dir)
    server, url = _start_server(cfg, run_dir, secrets)
    try:
        failure = await _serve_on(cfg, run_dir, secrets, server, url)
    finally:  # supervisor.pid and `ready` go in `whet up`'s own finally, on every way out
        with anyio.CancelScope(shield=True):
            if server is not None:
                await anyio.to_thread.run_sync(server.stop)
                log.info("nats.stopped", pids=server.pids)
    if failure is not None:
        raise ActorFailed(failure_line(failure))


async def _serve_on(cfg: RunConfig, run_dir: RunDir, secrets: Path | None,
                    server: EmbeddedServer | EmbeddedCluster | None,
                    url: str) -> ActorFailure | None:
    run_dir.url_file.write_text(url + "\n")
    pidfile.write(run_dir.pid_file, run_dir.run_id)
    from runtime import log as log_mod

    sink = log_mod.sink()
    settings = credentials.as_admin(bus_settings(cfg, url), cfg, secrets)
    bus = await Bus.connect(settings, Identity("supervisor", "supervisor", run_dir.run_id))
    supervisor = Supervisor(
        cfg, run_dir, url, bus,
        child_env=lambda kind: credentials.actor_env(kind, cfg, secrets, dict(os.environ)))
    try:
        await bus.ensure_topology(topology(cfg))
        await _record_run(bus, cfg, run_dir)
        async with anyio.create_task_group() as tg:
            if sink is not None:
                tg.start_soon(sink.forward, bus)
            tg.start_soon(_stop_on_signal, bus)
            await tg.start(supervisor.run)
            if cfg.autoscale.kinds:
                tg.start_soon(autoscale.run_autoscaler, bus, cfg.autoscale, supervisor.counts)
            log.info("stack.ready", run_id=run_dir.run_id, url=url, actors=supervisor.counts())
            (run_dir.path / "ready").write_text(f"{time.time()}\n")
            pids = lambda: {**supervisor.pids_by_kind(),  # noqa: E731
                            **({"nats": server.pids} if server else {})}
            tg.start_soon(progress.follow, bus, cfg, run_dir, pids)
            await bus.stopping.wait()
            await supervisor.done.wait()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            log.info("stack.stopped", run_id=run_dir.run_id,
                     failed=supervisor.failure.kind if supervisor.failure else None)
            if sink is not None:
                with anyio.move_on_after(2):
                    await sink.forward_pending(bus)
            with anyio.move_on_after(5):
                await bus.close()
    return supervisor.failure


def failure_line(failure: ActorFailure) -> str:
    """What the terminal says when a kind's crash loop stopped the stack."""
    return (f"actor kind {failure.kind!r} failed {failure.failures} times in a row before it "
            f"was ready: {failure.cause} (log: {failure.log})")


def _start_server(cfg: RunConfig, run_dir: RunDir, secrets: Path | None
                  ) -> tuple[EmbeddedServer | EmbeddedCluster | None, str]:
    """The embedded server or local cluster (with per-run users when auth is on), or the
    configured URL. Started from this (the main) thread, which the server's death signal is
    tied to."""
    if cfg.bus.url:
        credentials.require_external(cfg, secrets)  # fail now, not in every actor
        return None, cfg.bus.url
    options = dict(die_with_parent=True, sync_interval=cfg.bus.sync_interval,
                   extra_config=credentials.embedded_server_config(cfg, secrets))
    server = (EmbeddedCluster(run_dir.nats_dir, cfg.bus.embedded_nodes, **options)
              if cfg.bus.embedded_nodes > 1 else EmbeddedServer(run_dir.nats_dir, **options))
    url = server.start()
    log.info("nats.started", url=url, store=str(run_dir.nats_dir), pids=server.pids,
             auth=cfg.auth.enabled, tls=bool(cfg.auth.tls_cert_file or cfg.auth.tls),
             sync_interval=cfg.bus.sync_interval)
    return server, url


async def _stop_on_signal(bus: Bus) -> None:
    """SIGTERM (`whet down`), SIGINT (Ctrl-C) and SIGHUP (the terminal or pipe went away)
    stop the stack gracefully; the receiver stays open, so a second one cannot cut the
    drain short and leave the server behind."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            if bus.stopping.is_set():
                log.info("stack.stop_pending", signal=signal.Signals(signum).name)
                continue
            log.info("stack.stopping", signal=signal.Signals(signum).name)
            bus.stopping.set()


async def _record_run(bus: Bus, cfg: RunConfig, run_dir: RunDir) -> None:
    # A failing kind of an earlier run on the same server is not this run's.
    for key in await bus.kv_items(subjects.BUCKET_RUN, ActorFailure, prefix=subjects.FAILING_PREFIX):
        await bus.kv_delete(subjects.BUCKET_RUN, key)
    # Scale targets from an earlier run on the same server would override this config.
    for kind in cfg.actors.count:
        await bus.kv_put(subjects.BUCKET_RUN, subjects.scale_key(kind),
                         ScaleTarget(kind=kind, count=cfg.actors.count[kind],
                                     requested_at=time.time()))
    await bus.kv_put_bytes(subjects.BUCKET_RUN, "run.id", run_dir.run_id.encode())
    await bus.kv_put_bytes(subjects.BUCKET_RUN, "run.config", msgspec.json.encode(cfg))
