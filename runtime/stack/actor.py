"""One actor in one OS process: `python -m runtime.stack.actor --kind K --instance I ...`.

Consumes the resolved config, the NATS URL and the actor kind; runs that kind's `run`
function under anyio with a heartbeat beside it. Produces heartbeats in the actor registry
(KV) and events. On SIGTERM, SIGINT or SIGHUP (or when its supervisor dies) it sets `bus.stopping`, lets the
actor drain for `supervisor.drain_s`, then cancels it. It holds no domain logic.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

import anyio
import structlog

from bus import subjects
from bus.errors import BusUnavailable, ConfigError
from bus.messages import Heartbeat
from bus.nats_bus import Bus, Identity
from runtime import config as config_mod
from runtime import log as log_mod
from runtime.connect import bus_settings
from runtime.kinds import KINDS

log = structlog.get_logger("runtime.actor")


def resolve_target(kind: str, cfg: config_mod.RunConfig) -> Callable[..., Any]:
    """The `run` function of `kind`, from config targets or the built-in registry."""
    target = cfg.actors.target.get(kind) or KINDS.get(kind)
    if target is None:
        raise ConfigError("actors", kind, "unknown actor kind")
    module, _, func = target.partition(":")
    return getattr(importlib.import_module(module), func)


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: if the supervisor is killed, this process gets SIGTERM and drains.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass
    if os.getppid() == 1:
        sys.exit(0)


def limit_threads(n: int) -> None:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)


async def serve(kind: str, instance: str, cfg: config_mod.RunConfig, url: str,
                run_dir: str, *, run_id: str = "", ready_file: Path | None = None) -> None:
    """Connect, run the actor until stopped, keep its heartbeat, then leave cleanly.

    Outside a run directory (a container), `run_id` names the run. `ready_file` is touched
    after each heartbeat stored while the actor serves, and removed when it stops: a
    container health check reads its age."""
    run = resolve_target(kind, cfg)
    bus = await Bus.connect(bus_settings(cfg, url),
                            Identity(kind, instance, run_id or Path(run_dir).name, run_dir))
    sink = log_mod.sink()
    started_at = time.time()
    state = {"value": "starting"}
    ready_at = 0.0
    done = anyio.Event()
    beat_now = anyio.Event()

    async def run_actor(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            await run(bus, cfg, task_status=task_status)
        finally:
            done.set()

    async def heartbeat() -> None:
        nonlocal beat_now
        key = subjects.actor_key(kind, instance)
        while True:
            beat = Heartbeat(kind=kind, instance=instance, pid=os.getpid(),
                             host=socket.gethostname(), state=state["value"],
                             started_at=started_at, beat_at=time.time(),
                             interval_s=cfg.supervisor.heartbeat_s,
                             processed=bus.stats.processed, in_flight=bus.stats.in_flight,
                             policy_version=bus.stats.policy_version,
                             stats=dict(bus.stats.gauges), ready_at=ready_at)
            try:
                with anyio.fail_after(cfg.supervisor.heartbeat_s * 2):
                    await bus.kv_put(subjects.BUCKET_ACTORS, key, beat)
                if ready_file is not None and beat.state == "ready":
                    ready_file.touch()
            except (TimeoutError, BusUnavailable, OSError):
                pass
            if state["value"] == "stopped":
                return
            with anyio.move_on_after(cfg.supervisor.heartbeat_s):
                await beat_now.wait()  # readiness is told at once, not a beat later
            beat_now = anyio.Event()

    async def stop_on_signal(scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for _ in signals:
                if bus.stopping.is_set():
                    scope.cancel()
                    return
                log.info("actor.stopping")
                state["value"] = "stopping"
                bus.stopping.set()
                scope.deadline = anyio.current_time() + cfg.supervisor.drain_s + 5

    try:
        async with anyio.create_task_group() as tg:
            if sink is not None:
                tg.start_soon(sink.forward, bus)
            tg.start_soon(heartbeat)
            tg.start_soon(stop_on_signal, tg.cancel_scope)
            await tg.start(run_actor)
            state["value"], ready_at = "ready", time.time()
            beat_now.set()
            log.info("actor.started", pid=os.getpid())
            await done.wait()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            state["value"] = "stopped"
            if ready_file is not None:
                ready_file.unlink(missing_ok=True)
            log.info("actor.stopped", processed=bus.stats.processed)
            with anyio.move_on_after(3):
                await bus.kv_put(subjects.BUCKET_ACTORS, subjects.actor_key(kind, instance),
                                 Heartbeat(kind=kind, instance=instance, pid=os.getpid(),
                                           host=socket.gethostname(), state="stopped",
                                           started_at=started_at, beat_at=time.time(),
                                           processed=bus.stats.processed, ready_at=ready_at))
            if sink is not None:
                with anyio.move_on_after(2):
                    await sink.forward_pending(bus)
            await bus.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="runtime.stack.actor")
    parser.add_argument("--kind", required=True)
    parser.add_argument("--instance", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--run-dir", required=True)
    args = parser.parse_args(argv)
    _die_with_parent()
    cfg = config_mod.load(args.config)
    limit_threads(cfg.supervisor.threads.get(args.kind, cfg.supervisor.threads_per_actor))
    run_dir = Path(args.run_dir)
    log_mod.configure(kind=args.kind, instance=args.instance, run_id=run_dir.name,
                      level=cfg.logging.level, run_dir=run_dir)
    try:
        anyio.run(serve, args.kind, args.instance, cfg, args.url, str(run_dir))
    except KeyboardInterrupt:
        return 0
    except Exception:
        log.exception("actor.crashed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
