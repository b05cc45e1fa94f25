"""The docker backend: each job in a container of the Docker-API engine (dockerd, Podman).

Consumes `Job`s (up to `slots` at once); produces `ExecutionResult`s. Containers have no
network, a read-only root (the environment's image, imported from the same tree the local
backend uses) and every limit of `host_config`; the job folder is bind-mounted read-only at
/work. Output does not go through the engine's log driver (a flood would land on the host's
disk): stdout, stderr and the fd-3 report channel are host FIFOs read with the local
backend's cap. With `docker_warm_pool`, jobs whose limits match the pool run by `exec` in
warm containers (`sandbox.docker_pool`).
It does NOT start engines itself (`sandbox.engine` does) and never reuses a cold container.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import aiodocker
import anyio
import structlog

from bus.messages import ExecutionResult, Job, Limits
from sandbox import cgroups, engine, envs
from sandbox.config import SandboxConfig
from sandbox.docker_io import DRAIN_S, IO, JobChannels, remove_container
from sandbox.launch import WORK, job_env
from sandbox.local import write_job_files
from sandbox.outcome import Observed, bad_job, finished, nothing_to_run, sandbox_failure, split_shell_code
from sandbox.pipes import CappedReader
from sandbox.slots import SlotPool

log = structlog.get_logger("sandbox.docker")
WRAPPER = f'exec 3>{IO}/report 2>{IO}/stderr >{IO}/stdout <{IO}/stdin || exit 125; exec "$@"'
"Opens the channels inside the container, then becomes the job's command."


_DENIED = (
    # Kernel-wide state, modules, the clock, accounting, swap, consoles.
    "acct", "add_key", "clock_adjtime", "clock_adjtime64", "clock_settime", "clock_settime64",
    "delete_module", "finit_module", "init_module", "kexec_file_load", "kexec_load", "keyctl",
    "request_key", "reboot", "settimeofday", "stime", "swapoff", "swapon", "syslog", "vhangup",
    "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl", "iopl", "ioperm", "vm86", "vm86old",
    # Filesystems and mounts (the job needs none), and joining other namespaces.
    "mount", "umount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount",
    "fspick", "move_mount", "open_tree", "mount_setattr", "quotactl", "quotactl_fd",
    "open_by_handle_at", "lookup_dcookie", "fanotify_init", "setns", "sethostname", "setdomainname",
    # Other processes' memory and descriptors, tracing, eBPF, memory policy, async I/O rings.
    "kcmp", "pidfd_getfd", "process_madvise", "process_vm_readv", "process_vm_writev", "ptrace",
    "bpf", "perf_event_open", "userfaultfd", "get_mempolicy", "mbind", "set_mempolicy",
    "set_mempolicy_home_node", "move_pages", "migrate_pages", "io_uring_setup", "io_uring_enter",
    "io_uring_register",
)
SECCOMP = json.dumps({
    "defaultAction": "SCMP_ACT_ALLOW",
    "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
                {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]}],
    "syscalls": [{"names": list(_DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
}, separators=(",", ":"))
"""The job containers' seccomp profile. The engine's default refuses unshare and namespace
clones without CAP_SYS_ADMIN, and the harness needs them (without capabilities) to put the
candidate in a user and PID namespace of its own, where it cannot name the harness or the
reference. So: every call allowed but these, refused as without this profile (with every
capability dropped and no_new_privs, a user namespace grants nothing outside itself; the
local backend runs bubblewrap with no seccomp at all). It is a deny list: a system call a
newer kernel adds is allowed until it is named here."""


def host_config(limits: Limits, binds: list[str], runtime: str, parent: str) -> dict:
    """The HostConfig of a job container: every isolation and limit in one place (memory =
    memory+swap, pids and CPU limits, every capability dropped, no_new_privs, the slot's
    unprivileged uid, size-capped tmpfs at /tmp and /dev/shm)."""
    memory = limits.memory_mb * 1024 * 1024
    disk = limits.disk_mb * 1024 * 1024
    config = {
        "NetworkMode": "none", "ReadonlyRootfs": True, "Memory": memory, "MemorySwap": memory,
        "PidsLimit": limits.pids, "NanoCpus": int(limits.cpus * 1e9), "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges", f"seccomp={SECCOMP}"], "ShmSize": disk, "Binds": binds,
        "Tmpfs": {"/tmp": f"rw,nosuid,nodev,exec,size={disk},mode=1777"},
        "Ulimits": [{"Name": "cpu", "Soft": max(1, int(limits.cpu_s + 0.999)), "Hard": max(1, int(limits.cpu_s + 0.999))},
                    {"Name": "fsize", "Soft": disk, "Hard": disk},
                    {"Name": "nofile", "Soft": limits.nofile, "Hard": limits.nofile},
                    {"Name": "core", "Soft": 0, "Hard": 0}],
        "LogConfig": {"Type": "json-file", "Config": {"max-size": "256k", "max-file": "1"}},
        "Runtime": runtime,
        "Init": True,  # the job is not pid 1 (which ignores signals), exactly as under bwrap
    }
    if parent:
        config["CgroupParent"] = parent
    return config


class DockerBackend:
    """Runs each job in a fresh container: create -> start -> wait (with the job's timeout) ->
    kill -> inspect (OOMKilled) -> logs (only when the job's wrapper failed) -> force-remove in
    `finally`. CPU seconds and peak memory come from the slot's parent cgroup (`CgroupParent`),
    when the engine is local and uses cgroupfs; otherwise they are 0."""

    name = "docker"

    def __init__(self, config: SandboxConfig, docker: aiodocker.Docker, slots: int,
                 run_id: str, layout: cgroups.Layout | None) -> None:
        self.config = config
        self.docker = docker
        self.run_id = run_id
        self.pool = SlotPool(slots)
        self.root = Path(tempfile.mkdtemp(prefix="whet-docker-", dir=config.workdir_root or None))
        self.root.chmod(0o755)
        self.group = f"whet-docker-{os.getpid()}"
        self.cgroups: list[cgroups.SlotCgroup | None] = [None] * slots
        if layout is not None:
            cgroups.reap_stale(layout, "whet-docker-")
            cgroups.SlotCgroup.prepare_root(layout, self.group)
            self.cgroups = [cgroups.SlotCgroup(layout, self.group, i) for i in range(slots)]
        self.layout = layout
        self.images: dict[str, str] = {}
        self.warm = None

    @classmethod
    async def open(cls, config: SandboxConfig, slots: int, run_id: str = "") -> DockerBackend:
        docker = await engine.connect(config.docker_host, start=config.docker_start_engine)
        info = await docker.system.info()
        layout = None
        if info.get("CgroupDriver") == "cgroupfs" and engine.engine_url(config.docker_host).startswith("unix://"):
            layout = cgroups.detect().at_root()
        run_id = run_id or f"exec-{os.getpid()}-{int(time.time())}"
        backend = cls(config, docker, slots, run_id, layout)
        await engine.reap(docker, run_id)
        log.info("sandbox.opened", backend=cls.name, engine=info.get("ServerVersion"),
                 cgroups=info.get("CgroupVersion"), driver=info.get("CgroupDriver"),
                 accounting=layout is not None, runtime=config.docker_runtime, run_id=run_id)
        if config.docker_warm_pool:
            from sandbox.docker_pool import WarmPool

            backend.warm = WarmPool(backend, min(config.docker_warm_pool, slots))
        return backend

    async def image(self, runtime: str) -> str:
        env = envs.spec(runtime)
        if runtime not in self.images:
            self.images[runtime] = await engine.ensure_image(self.docker, env, self.config.envs_dir)
        return self.images[runtime]

    def slot_dirs(self, index: int) -> tuple[Path, Path]:
        work, io = self.root / f"slot{index}" / "work", self.root / f"slot{index}" / "io"
        io.mkdir(parents=True, exist_ok=True)
        return work, io

    def parent(self, index: int) -> str:
        return f"/{self.group}/slot{index}" if self.layout is not None else ""

    def container_config(self, job: Job, index: int, command: list[str], image: str) -> dict:
        work, io = self.slot_dirs(index)
        uid = self.config.uid_base + index
        env = job_env(envs.spec(job.runtime))
        return {
            "Image": image, "Cmd": command, "User": f"{uid}:{uid}", "WorkingDir": WORK,
            "Env": [f"{k}={v}" for k, v in env.items()], "NetworkDisabled": True,
            "Labels": {engine.LABEL_RUN: self.run_id, engine.LABEL_SLOT: str(index)},
            "HostConfig": host_config(job.limits, [f"{work}:{WORK}:ro", f"{io}:{IO}:ro"],
                                      self.config.docker_runtime, self.parent(index)),
        }

    async def run(self, job: Job) -> ExecutionResult:
        if not job.command:
            return nothing_to_run(self.name)
        try:
            image = await self.image(job.runtime)
        except ValueError as exc:
            return bad_job(self.name, str(exc))
        except (aiodocker.DockerError, RuntimeError, OSError) as exc:
            return sandbox_failure(self.name, f"image for runtime {job.runtime!r}: {exc}")
        index = await self.pool.take()
        try:
            problem = write_job_files(self.slot_dirs(index)[0], job)
            if problem:
                return bad_job(self.name, problem)
            if self.warm is not None and self.warm.accepts(job):
                return await self.warm.run(job, index)
            return await self._run_cold(job, index, image)
        finally:
            await self.pool.give(index)

    def start_accounting(self, index: int, limits: Limits) -> cgroups.SlotCgroup | None:
        cg = self.cgroups[index]
        if cg is not None:
            # Limits are the container's; the parent only counts (generous so it never binds).
            cg.start_job(limits.memory_mb * 4, max(limits.pids * 4, 64), 64.0)
        return cg

    async def _run_cold(self, job: Job, index: int, image: str) -> ExecutionResult:
        started = time.monotonic()
        _, io = self.slot_dirs(index)
        uid = self.config.uid_base + index
        channels = JobChannels(io, uid, job.stdin)
        container = None
        seen = Observed()
        try:
            cg = self.start_accounting(index, job.limits)
            config = self.container_config(job, index, ["/bin/sh", "-c", WRAPPER, "whet", *job.command], image)
            container = await self.docker.containers.create(config)
            readers = self._readers(job, channels, seen, container)
            code, oom, engine_log = await self._start_and_wait(job, container, readers, channels, seen)
        except (aiodocker.DockerError, OSError) as exc:
            log.error("sandbox.container_failed", error=str(exc))
            return sandbox_failure(self.name, f"container engine: {exc}", time.monotonic() - started)
        finally:
            channels.close()
            if container is not None:
                with anyio.CancelScope(shield=True):
                    await remove_container(container)
        seen.wall_s = time.monotonic() - started
        return self.conclude(job, seen, readers, cg, code, oom, engine_log)

    def _readers(self, job: Job, channels: JobChannels, seen: Observed, container) -> list[CappedReader]:
        def flooded() -> None:
            seen.output_limited = True

        cap = job.limits.output_bytes
        fds = channels.read_fds
        return [CappedReader(fd, cap, flooded) for fd in fds[:3]] + [CappedReader(fds[3], 256, wait_first=True)]

    async def _start_and_wait(self, job: Job, container, readers, channels: JobChannels,
                              seen: Observed) -> tuple[int | None, bool, str]:
        async with anyio.create_task_group() as tg:
            for reader in readers:
                tg.start_soon(reader.run)
            await container.start()
            with anyio.move_on_after(job.limits.timeout_s) as deadline:
                while not seen.output_limited:
                    with anyio.move_on_after(0.25):
                        await container.wait()
                        break
            seen.timed_out = deadline.cancelled_caught
            if seen.timed_out or seen.output_limited:
                await _kill(container)
            state = (await container.show())["State"]
            engine_log = ""
            if state.get("ExitCode") == 125 and not seen.timed_out:
                # The wrapper could not open its FIFOs: only the engine's log says why.
                engine_log = "".join(await container.log(stdout=True, stderr=True))[-2000:]
            channels.release()
            with anyio.move_on_after(DRAIN_S):
                for reader in readers[:3]:  # the status FIFO is the warm pool's only
                    await reader.eof.wait()
            tg.cancel_scope.cancel()
        return state.get("ExitCode"), bool(state.get("OOMKilled")), engine_log

    def conclude(self, job: Job, seen: Observed, readers: list[CappedReader],
                 cg: cgroups.SlotCgroup | None, code: int | None, oom: bool,
                 engine_log: str = "") -> ExecutionResult:
        out, err, rep, _ = readers
        if cg is not None:
            seen.cpu_s, seen.peak_memory_mb, cg_oom = cg.usage()
            oom = oom or cg_oom
        seen.oom = oom
        if code is not None and not seen.timed_out:
            seen.exit_code, seen.signal = split_shell_code(code)
        elif seen.timed_out:
            seen.signal = 9
        seen.take_output(out, err, rep)
        if code == 125 and not seen.stderr and not seen.timed_out:
            return sandbox_failure(self.name, f"the job wrapper could not open its channels: {engine_log}",
                                   seen.wall_s)
        return finished(seen, job, self.name)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            if self.warm is not None:
                await self.warm.aclose()
            try:
                await engine.reap(self.docker, self.run_id)
            finally:
                await self.docker.close()
                for cg in self.cgroups:
                    if cg is not None:
                        cg.remove()
                if self.layout is not None:
                    cgroups.remove_group(self.layout, self.group)
                shutil.rmtree(self.root, ignore_errors=True)


async def _kill(container) -> None:
    try:
        await container.kill(signal="SIGKILL")
    except aiodocker.DockerError as exc:
        if exc.status not in (404, 409):  # already gone, or not running any more
            raise
