"""The local backend: each job in bubblewrap namespaces, inside its slot's cgroup.

Consumes `Job`s (up to `slots` at once); produces `ExecutionResult`s. Per job it writes the
files into the slot's folder (read-only to the job), sets the slot cgroup's limits, starts the
launcher of `sandbox.launch`, reads stdout, stderr and the fd-3 report channel with a cap and
a deadline, then kills whatever is left through the cgroup (a `setsid` orphan included: the
pid namespace dies with its first process, and `cgroup.kill` finishes the rest) and reads CPU
seconds, peak memory and OOM kills from the cgroup.

Jobs of the python runtime start in sandboxes pre-forked by a zygote (`sandbox.zygote`,
same isolation built with unshare) when `prefork` is set, and `python3 ...` commands run
in-process there when `warm_python` is set; other runtimes use bubblewrap per job.
It does NOT contain anything without cgroups and bubblewrap: `open` fails with
a clear error instead.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import anyio
import structlog

from bus.errors import SandboxUnavailable
from bus.messages import ExecutionResult, Job
from sandbox import cgroups, envs, host
from sandbox.config import SandboxConfig
from sandbox.launch import BWRAP, HOST_PYTHON, STATUS_FD, Slot, bwrap_args, job_env, spawn_request
from sandbox.outcome import (Observed, bad_job, finished, nothing_to_run, safe_relative,
                             sandbox_failure, split_shell_code)
from sandbox.pipes import CappedReader, close_quietly, pipe, read_all
from sandbox.slots import SlotPool
from sandbox.spawners import SlotSpawners

log = structlog.get_logger("sandbox.local")
DRAIN_S = 2.0
"How long output may keep flowing after the job was killed (writers are dead by then)."


async def reap(cg: cgroups.SlotCgroup) -> bool:
    """Kill whatever of a job is left in its slot (in a thread only when there is any)."""
    if not cg.strays():
        return True
    return await anyio.to_thread.run_sync(cg.kill_all)


def write_job_files(folder: Path, job: Job) -> str | None:
    """Empty `folder` (kept: a waiting warm sandbox has it bound) and write `job.files` there;
    an error message if a name escapes it."""
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    for item in folder.iterdir():
        if item.is_dir() and not item.is_symlink():
            shutil.rmtree(item)
        else:
            item.unlink()
    for name, data in job.files.items():
        if not safe_relative(name):
            return f"job file name {name!r} must be a relative path inside the job folder"
        path = folder / name
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o644)
    return None


class LocalBackend:
    """The `local` backend: bubblewrap and a cgroup per slot, with the warm Python zygote."""

    name = "local"

    def __init__(self, config: SandboxConfig, slots: int) -> None:
        self.config = config
        self.layout = cgroups.detect()
        self.group = f"whet-{os.getpid()}"
        cgroups.reap_stale(self.layout, "whet-")
        self.root = Path(tempfile.mkdtemp(prefix=f"{self.group}-", dir=config.workdir_root or None))
        self.root.chmod(0o755)
        cgroups.SlotCgroup.prepare_root(self.layout, self.group)
        # Pre-forking: two slots per concurrent job, one gets its sandbox while the other runs.
        slots = slots * 2 if config.prefork else slots
        self.cgroups = [cgroups.SlotCgroup(self.layout, self.group, i) for i in range(slots)]
        self.pool = SlotPool(slots)
        self.spawners = SlotSpawners(self)
        self.warm = None
        self.bwrap = BWRAP
        "The bubblewrap binary (the one on PATH, once opened)."
        log.info("sandbox.opened", backend=self.name, cgroups=self.layout.describe(),
                 slots=slots, uid_base=config.uid_base, root=str(self.root))

    @classmethod
    async def open(cls, config: SandboxConfig, slots: int) -> LocalBackend:
        problems = host.local_problems(HOST_PYTHON)
        if problems:
            raise SandboxUnavailable("; ".join(f"{what} (fix: {fix})" for what, fix in problems))
        backend = cls(config, slots)
        backend.bwrap = host.which(host.BUBBLEWRAP.command) or BWRAP
        if config.prefork:
            from sandbox.zygote import WarmPython

            backend.warm = WarmPython(backend)
        return backend

    async def run(self, job: Job) -> ExecutionResult:
        if not job.command:
            return nothing_to_run(self.name)
        try:
            env = envs.spec(job.runtime)
        except ValueError as exc:
            return bad_job(self.name, str(exc))
        if not envs.is_built(env, self.config.envs_dir):
            return sandbox_failure(self.name, f"runtime {env.key} is not built at "
                                   f"{envs.rootfs(env, self.config.envs_dir)}; run "
                                   "`python -m sandbox.envbuild`")
        index = await self.pool.take()
        try:
            folder = self.root / f"slot{index}"
            problem = write_job_files(folder, job)
            if problem:
                return bad_job(self.name, problem)
            if self.warm is not None and self.warm.accepts(job):
                return await self.warm.run(job, index, folder)
            return await self._run_cold(job, env, index, folder)
        finally:
            await self._give_slot(index)

    def slot(self, index: int) -> Slot:
        return Slot(index, self.config.uid_base + index, tuple(self.cgroups[index].procs_files))

    async def _give_slot(self, index: int) -> None:
        with anyio.CancelScope(shield=True):
            cg = self.cgroups[index]
            if not await reap(cg):
                log.error("sandbox.slot_stuck", slot=index, pids=cg.pids())
                self.pool.retire(index)
                return
            if self.warm is not None and self.warm.sock is not None:
                try:
                    await self.warm.prepare(index)
                except (OSError, RuntimeError, TimeoutError) as exc:
                    log.warning("sandbox.zygote_prepare_failed", slot=index, error=repr(exc))
            await self.pool.give(index)

    async def _run_cold(self, job: Job, env: envs.EnvSpec, index: int, folder: Path) -> ExecutionResult:
        cg = self.cgroups[index]
        started = time.monotonic()
        try:
            cg.start_job(job.limits.memory_mb, job.limits.pids, job.limits.cpus)
        except OSError as exc:
            return sandbox_failure(self.name, f"cgroup set-up of slot {index}: {exc}")
        (out_r, out_w), (err_r, err_w), (rep_r, rep_w), (st_r, st_w) = (pipe() for _ in range(4))
        bwrap = bwrap_args(str(envs.rootfs(env, self.config.envs_dir)), str(folder), job.limits,
                           job_env(env), status_fd=STATUS_FD, bwrap=self.bwrap)
        request = spawn_request(self.slot(index), job.limits, bwrap, job.command)
        stdin_path = self.root / f"slot{index}.stdin"
        stdin_path.write_bytes(job.stdin)
        try:
            with open(stdin_path, "rb") as stdin:
                await self.spawners.launch(index, request, [stdin.fileno(), out_w, err_w, rep_w, st_w])
        except (OSError, RuntimeError) as exc:
            close_quietly(out_r, err_r, rep_r, st_r)
            return sandbox_failure(self.name, f"launcher did not start: {exc}")
        finally:
            close_quietly(out_w, err_w, rep_w, st_w)
        seen, readers = await self.watch(job, cg, started, (out_r, err_r, rep_r, st_r))
        status = readers[3].text()
        if "child-pid" not in status and not seen.timed_out:
            detail = readers[1].text()[-2000:] or "the launcher ended before the sandbox started"
            return sandbox_failure(self.name, f"sandbox did not start: {detail}", seen.wall_s)
        codes = re.findall(r'"exit-code"\s*:\s*(-?\d+)', status)
        if codes:
            seen.exit_code, seen.signal = split_shell_code(int(codes[-1]))
        elif seen.timed_out or seen.output_limited or seen.oom:
            seen.signal = 9  # we (or the OOM killer) ended it before bubblewrap could report
        elif "bwrap: execvp" in seen.stderr:
            seen.exit_code = 127  # the command does not exist: the job's fault, as in a shell
        else:
            return sandbox_failure(self.name, f"sandbox ended without a status: {seen.stderr[-2000:]}",
                                   seen.wall_s)
        return self.finish(job, seen)

    async def watch(self, job: Job, cg: cgroups.SlotCgroup, started: float,
                    fds: tuple[int, int, int, int], ended=None) -> tuple[Observed, list[CappedReader]]:
        """Read the job's channels until `ended()` returns (default: the status channel's EOF)
        or the deadline; then reap the slot and read its accounting."""
        seen = Observed()
        cap = job.limits.output_bytes

        def flooded() -> None:
            seen.output_limited = True
            cg.kill_all(wait_s=0)

        readers = [CappedReader(fd, cap, flooded) for fd in fds[:3]] + [CappedReader(fds[3], 4096)]
        ended = ended or readers[3].eof.wait
        try:
            with anyio.move_on_after(job.limits.timeout_s) as deadline:
                async with anyio.create_task_group() as tg:
                    for reader in readers:
                        tg.start_soon(reader.run)
                    await ended()
            seen.timed_out = deadline.cancelled_caught
            with anyio.CancelScope(shield=True):
                await reap(cg)
                await ended()
                await read_all(readers, DRAIN_S)
        finally:
            close_quietly(*fds)
        seen.wall_s = time.monotonic() - started
        out, err, rep, _ = readers
        seen.cpu_s, seen.peak_memory_mb, seen.oom = cg.usage()
        seen.take_output(out, err, rep)
        return seen, readers

    def finish(self, job: Job, seen: Observed) -> ExecutionResult:
        return finished(seen, job, self.name)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            if self.warm is not None:
                await self.warm.aclose()
            await self.spawners.aclose()
            for cg in self.cgroups:
                await anyio.to_thread.run_sync(cg.kill_all)
                cg.remove()
            cgroups.remove_group(self.layout, self.group)
            shutil.rmtree(self.root, ignore_errors=True)

