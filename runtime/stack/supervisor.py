"""The supervisor: N OS processes per actor kind, restarted on crash, rescaled at runtime.

Consumes the run config (initial counts) and `ScaleTarget` entries in the run KV bucket
(`whet scale` writes them); produces actor processes (`runtime.stack.actor`), each with its
own log file under `<run dir>/logs/`. A crashed process is restarted in the same slot after
a backoff that doubles per crash and resets once it has run for a while. A slot whose
process crashes `crash_loop_limit` times in a row without ever becoming ready (its
heartbeat's `ready_at`) makes its kind failing: an `actor.crash_looped` error with the
crash's last exception line, an `ActorFailure` in KV whet-run and in the run directory
(`failure.json`, for `whet status` once the stack is gone), and a stop of the stack.
Scaling down sends SIGTERM to the newest instances, which drain or give back their work.
A running process that stops beating is told about (`runtime.stack.liveness`), not killed.

It does no domain work and never touches messages other than scale targets.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import anyio
import anyio.abc
import msgspec
import structlog

from bus import subjects
from bus.errors import BusUnavailable
from bus.messages import ActorFailure, Heartbeat, ScaleTarget
from bus.nats_bus import Bus
from runtime.config import RunConfig
from runtime.stack import crash_cause
from runtime.stack.liveness import Liveness
from runtime.stack.rundir import RunDir

log = structlog.get_logger("runtime.stack.supervisor")
_STABLE_S = 30.0


@dataclass
class Slot:
    """One instance of a kind: its id, its current process, and whether it is retired."""

    kind: str
    instance: str
    proc: anyio.abc.Process | None = None
    retired: bool = False
    restarts: int = 0
    failures: int = 0
    "Crashes in a row of processes that never became ready."
    exited: anyio.Event = field(default_factory=anyio.Event)


class Supervisor:
    """Starts, watches and restarts each kind's actor processes; `scale` (and the scale targets
    it follows in KV) changes how many run."""

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
        self.failure: ActorFailure | None = None
        "The crash loop that stopped the stack, if one did."

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
            tg.start_soon(self._watch_liveness)
            task_status.started()
            await self.bus.stopping.wait()
            log.info("supervisor.stopping")
            with anyio.CancelScope(shield=True):
                await self._stop_all()
                self.done.set()
            tg.cancel_scope.cancel()

    def pids_by_kind(self) -> dict[str, list[int]]:
        """Process ids of the actor processes running now, by kind."""
        return {kind: [s.proc.pid for s in slots if s.proc is not None and s.proc.returncode is None]
                for kind, slots in self.slots.items()}

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
        async for target in self.bus.kv_watch(subjects.BUCKET_RUN, "scale.*", ScaleTarget):
            if self.counts().get(target.kind, 0) != target.count:
                self.scale(target.kind, target.count)

    async def _watch_liveness(self) -> None:
        """Look at the heartbeats once a beat: `actor.unresponsive` for a running process
        silent for three beats while the bus answers, `actor.responsive` when it beats again."""
        interval = self.cfg.supervisor.heartbeat_s
        liveness, answering_since = Liveness(), time.time()
        while True:
            await anyio.sleep(interval)
            try:
                with anyio.fail_after(2 * interval):
                    beats = await self.bus.kv_items(subjects.BUCKET_ACTORS, Heartbeat)
            except Exception:  # noqa: BLE001 - an outage: nobody can beat; look again later
                answering_since = 0.0
                continue
            now = time.time()
            answering_since = answering_since or now
            running = {s.instance: s.proc.pid for slots in self.slots.values() for s in slots
                       if s.proc is not None and s.proc.returncode is None}
            for event, fields in liveness.look(running, beats.values(), now, answering_since):
                (log.warning if event == "actor.unresponsive" else log.info)(event, **fields)

    def _command(self, slot: Slot) -> list[str]:
        return [sys.executable, "-m", "runtime.stack.actor", "--kind", slot.kind,
                "--instance", slot.instance, "--config", str(self.run_dir.config_file),
                "--url", self.url, "--run-dir", str(self.run_dir.path)]

    async def _keep_running(self, slot: Slot) -> None:
        backoff = self.cfg.supervisor.restart_backoff_s
        logs = self.run_dir.path / "logs"
        logs.mkdir(exist_ok=True)
        while not slot.retired and not self.bus.stopping.is_set():
            out_path = logs / f"{slot.instance}.out"
            out = open(out_path, "ab")
            offset, started, spawned_at = out.tell(), time.monotonic(), time.time()
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
            ready = await self._was_ready(slot, slot.proc.pid)
            slot.failures = 0 if ready is not False else slot.failures + 1
            why = crash_cause.cause(logs, slot.instance, spawned_at, offset) or f"exit code {code}"
            if time.monotonic() - started > _STABLE_S:
                backoff = self.cfg.supervisor.restart_backoff_s
            log.warning("actor.exited", kind=slot.kind, child=slot.instance, code=code,
                        cause=why, ready=ready, restart_in_s=backoff, restarts=slot.restarts)
            if slot.failures >= self.cfg.supervisor.crash_loop_limit:
                await self._crash_looped(slot, why, out_path)
                break
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, self.cfg.supervisor.restart_backoff_max_s)
        self.slots[slot.kind] = [s for s in self.slots[slot.kind] if s is not slot or not s.retired]

    async def _was_ready(self, slot: Slot, pid: int) -> bool | None:
        """Whether process `pid` of `slot` ever became ready, from its last heartbeat; None
        when the bus cannot say (an outage is no evidence of a crash loop)."""
        try:
            with anyio.fail_after(5):
                beat = await self.bus.kv_get(subjects.BUCKET_ACTORS,
                                             subjects.actor_key(slot.kind, slot.instance), Heartbeat)
        except (TimeoutError, BusUnavailable, OSError):
            return None
        return beat is not None and beat.pid == pid and beat.ready_at > 0

    async def _crash_looped(self, slot: Slot, why: str, out_path: Path) -> None:
        """Record why `slot`'s kind is failing, where `whet status` finds it, and stop."""
        failure = ActorFailure(kind=slot.kind, instance=slot.instance, failures=slot.failures,
                               cause=why, log=str(out_path), at=time.time())
        self.failure = self.failure or failure
        log.error("actor.crash_looped", kind=slot.kind, child=slot.instance,
                  failures=slot.failures, cause=why, log=str(out_path))
        self.run_dir.failure_file.write_bytes(msgspec.json.encode(failure))
        try:
            with anyio.fail_after(5):
                await self.bus.kv_put(subjects.BUCKET_RUN, subjects.failing_key(slot.kind), failure)
        except (TimeoutError, BusUnavailable, OSError) as exc:
            log.warning("supervisor.failure_not_recorded", kind=slot.kind, error=repr(exc))
        self.bus.stopping.set()

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
