"""The supervisor: N OS processes per actor kind, restarted on crash, rescaled at runtime.

Consumes the run config (initial counts) and `ScaleTarget` entries in the run KV bucket
(`whet scale` writes them); produces actor processes (`runtime.actor_main`), each with its
own log file under `<run dir>/logs/`. A crashed process is restarted in the same slot after
a backoff that doubles per crash and resets once it has run for a while. Scaling down sends
SIGTERM to the newest instances, which drain or give back their work.

It does no domain work and never touches messages other than scale targets.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import anyio
import anyio.abc
import structlog

from bus import subjects
from bus.errors import BusUnavailable
from bus.messages import ScaleTarget
from bus.nats_bus import Bus
from runtime.config import RunConfig
from runtime.rundir import RunDir

log = structlog.get_logger("runtime.supervisor")
_STABLE_S = 30.0


@dataclass
class Slot:
    """One instance of a kind: its id, its current process, and whether it is retired."""

    kind: str
    instance: str
    proc: anyio.abc.Process | None = None
    retired: bool = False
    restarts: int = 0
    exited: anyio.Event = field(default_factory=anyio.Event)


class Supervisor:
    def __init__(self, cfg: RunConfig, run_dir: RunDir, url: str, bus: Bus,
                 child_env: Callable[[str], dict[str, str]] | None = None) -> None:
        self.cfg, self.run_dir, self.url, self.bus = cfg, run_dir, url, bus
        self.child_env = child_env or (lambda kind: dict(os.environ))
        "Environment of a new process of a kind (its NATS login, when auth is on)."
        self.slots: dict[str, list[Slot]] = {}
        self.next_index: dict[str, int] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self.done = anyio.Event()
        "Set once every actor process has exited after a stop."

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Start every kind at its desired count; follow scale targets until stopping."""
        targets = await self.bus.kv_items(subjects.BUCKET_RUN, ScaleTarget, prefix="scale.")
        desired = dict(self.cfg.actors.count)
        desired.update({t.kind: t.count for t in targets.values()})
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for kind, count in desired.items():
                self.scale(kind, count)
            tg.start_soon(self._follow_scale_targets)
            task_status.started()
            await self.bus.stopping.wait()
            log.info("supervisor.stopping")
            with anyio.CancelScope(shield=True):
                await self._stop_all()
                self.done.set()
            tg.cancel_scope.cancel()

    def child_pids(self) -> list[int]:
        """Process ids of the actor processes running now."""
        return [s.proc.pid for slots in self.slots.values() for s in slots
                if s.proc is not None and s.proc.returncode is None]

    def counts(self) -> dict[str, int]:
        return {kind: sum(not s.retired for s in slots) for kind, slots in self.slots.items()}

    def scale(self, kind: str, count: int) -> None:
        """Start or retire instances of `kind` until `count` are live."""
        assert self._tg is not None
        live = [s for s in self.slots.setdefault(kind, []) if not s.retired]
        for _ in range(count - len(live)):
            n = self.next_index.get(kind, 0) + 1
            self.next_index[kind] = n
            slot = Slot(kind, f"{kind}-{n}")
            self.slots[kind].append(slot)
            self._tg.start_soon(self._keep_running, slot)
        for slot in reversed(live[count:] if count < len(live) else []):
            slot.retired = True
            self._tg.start_soon(self._retire, slot)
        if count != len(live):
            log.info("supervisor.scaled", kind=kind, before=len(live), after=count)

    async def _follow_scale_targets(self) -> None:
        while True:
            try:
                async for target in self.bus.kv_watch(subjects.BUCKET_RUN, "scale.*", ScaleTarget):
                    if self.counts().get(target.kind, 0) != target.count:
                        self.scale(target.kind, target.count)
            except (BusUnavailable, OSError, Exception) as exc:  # noqa: BLE001 - keep following
                log.warning("supervisor.scale_watch_failed", error=repr(exc))
                await anyio.sleep(1.0)

    def _command(self, slot: Slot) -> list[str]:
        return [sys.executable, "-m", "runtime.actor_main", "--kind", slot.kind,
                "--instance", slot.instance, "--config", str(self.run_dir.config_file),
                "--url", self.url, "--run-dir", str(self.run_dir.path)]

    async def _keep_running(self, slot: Slot) -> None:
        backoff = self.cfg.supervisor.restart_backoff_s
        logs = self.run_dir.path / "logs"
        logs.mkdir(exist_ok=True)
        while not slot.retired and not self.bus.stopping.is_set():
            out = open(logs / f"{slot.instance}.out", "ab")
            started = time.monotonic()
            slot.exited = anyio.Event()
            try:
                slot.proc = await anyio.open_process(self._command(slot), stdin=subprocess.DEVNULL,
                                                     stdout=out, stderr=subprocess.STDOUT,
                                                     env=self.child_env(slot.kind))
            finally:
                out.close()
            log.info("actor.spawned", kind=slot.kind, child=slot.instance, pid=slot.proc.pid)
            code = await slot.proc.wait()
            slot.exited.set()
            if slot.retired or self.bus.stopping.is_set():
                break
            slot.restarts += 1
            if time.monotonic() - started > _STABLE_S:
                backoff = self.cfg.supervisor.restart_backoff_s
            log.warning("actor.exited", kind=slot.kind, child=slot.instance, code=code,
                        restart_in_s=backoff, restarts=slot.restarts)
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, self.cfg.supervisor.restart_backoff_max_s)
        self.slots[slot.kind] = [s for s in self.slots[slot.kind] if s is not slot or not s.retired]

    async def _retire(self, slot: Slot) -> None:
        await self._terminate(slot)
        log.info("actor.retired", kind=slot.kind, child=slot.instance)

    async def _terminate(self, slot: Slot) -> None:
        proc = slot.proc
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        with anyio.move_on_after(self.cfg.supervisor.drain_s + 10):
            await slot.exited.wait()
            return
        log.warning("actor.killed", kind=slot.kind, child=slot.instance,
                    reason="did not stop within the drain time")
        proc.kill()

    async def _stop_all(self) -> None:
        every = [s for slots in self.slots.values() for s in slots]
        for slot in every:
            slot.retired = True
        async with anyio.create_task_group() as tg:
            for slot in every:
                tg.start_soon(self._terminate, slot)
