"""The warm path of the local backend: Python jobs forked from a preloaded zygote.

Consumes `python3 -c/-m/script` jobs the local backend hands over (its slot already taken and
the job files written); produces the same `ExecutionResult` the cold path would, through the
same cgroup accounting and the same output reading.

The zygote (`sandbox/zygote_server.py`) runs as root in a bubblewrap sandbox of its own
(the python environment tree read-only as `/`, no network), started on first use and again
after a crash. Each job gets fresh pid, mount, net, ipc and uts namespaces, fresh tmpfs, its
slot's cgroup, uid and rlimits, exactly as on the cold path; only the interpreter start and
module imports are skipped. It does NOT handle other runtimes or other python flags: those
go to the cold path.
"""

from __future__ import annotations

import array
import json
import math
import os
import shutil
import socket
import time
from pathlib import Path

import anyio
import structlog

from bus.messages import ExecutionResult, Job
from sandbox import envs
from sandbox.launch import job_env
from sandbox.outcome import sandbox_failure, split_shell_code
from sandbox.pipes import close_quietly, pipe

log = structlog.get_logger("sandbox.zygote")
SERVER = Path(__file__).with_name("zygote_server.py")
PYTHONS = ("python3", "python", "/usr/bin/python3")
FLAGS = ("-I", "-S", "-s", "-P", "-u", "-B", "-E")
"Interpreter flags `zygote_server.emulate_flags` reproduces; any other goes the cold way."
START_TIMEOUT_S = 60.0


class WarmPython:
    """The host side of the warm Python zygote (`sandbox/zygote_server.py`) and its slots' sandboxes."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.env = envs.spec("python")
        self.proc = None
        self.sock: socket.socket | None = None
        self.lock = anyio.Lock()
        self.prepared: dict[int, socket.socket] = {}
        "slot -> host end of the channel to that slot's waiting sandbox."
        self.residents: dict[int, tuple[socket.socket, int]] = {}
        "slot -> (channel to the slot's resident zygote process, its pid)."

    def accepts(self, job: Job) -> bool:
        """Any job of the python runtime (its tree is the zygote's)."""
        return job.runtime == "python"

    def in_process(self, job: Job) -> bool:
        """`python3 [-I -S -s -P -u -B -E] (-c CODE | -m MOD | FILE.py) ...`, when warm_python."""
        cmd = job.command
        if not self.backend.config.warm_python or len(cmd) < 2 or cmd[0] not in PYTHONS:
            return False
        rest = cmd[1:]
        while rest and rest[0] in FLAGS:
            rest = rest[1:]
        return bool(rest) and (rest[0] in ("-c", "-m") and len(rest) >= 2 or rest[0].endswith(".py"))

    async def _ensure_started(self) -> socket.socket:
        async with self.lock:
            if self.proc is not None and self.proc.returncode is None and self.sock is not None:
                return self.sock
            await self._stop()
            root = self.backend.root
            shutil.copy(SERVER, root / "zygote_server.py")
            procs = {str(i): cg.procs_files for i, cg in enumerate(self.backend.cgroups)}
            (root / "zygote.json").write_text(json.dumps({"cgroup_procs": procs}))
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            rootfs = str(envs.rootfs(self.env, self.backend.config.envs_dir))
            argv = [self.backend.bwrap, "--unshare-ipc", "--unshare-net", "--unshare-uts", "--die-with-parent",
                    "--cap-add", "ALL", "--ro-bind", rootfs, "/", "--proc", "/proc", "--dev", "/dev",
                    "--tmpfs", "/tmp", "--ro-bind", "/sys", "/sys",
                    "--bind", "/sys/fs/cgroup", "/sys/fs/cgroup",
                    "--ro-bind", str(root), "/.whet", "--chdir", "/", "--clearenv"]
            for key, value in job_env(self.env).items():
                argv += ["--setenv", key, value]
            argv += ["--", "/usr/bin/python3", "/.whet/zygote_server.py", str(theirs.fileno())]
            self.proc = await anyio.open_process(argv, stdin=None, stdout=None, stderr=None,
                                                 pass_fds=(theirs.fileno(),), start_new_session=True)
            theirs.close()
            ours.setblocking(False)
            with anyio.fail_after(START_TIMEOUT_S):
                await anyio.wait_readable(ours)
                hello = ours.recv(16)
            if hello != b"ready":
                raise RuntimeError(f"zygote did not start (said {hello!r})")
            self.sock = ours
            log.info("sandbox.zygote_started", pid=self.proc.pid)
            return ours

    async def _resident(self, index: int) -> socket.socket:
        """The channel to slot `index`'s resident (forked from the zygote on first use)."""
        if index in self.residents:
            return self.residents[index][0]
        sock = await self._ensure_started()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.sendmsg([str(index).encode()],
                         [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [theirs.fileno()]))])
        finally:
            theirs.close()
        ours.setblocking(False)
        with anyio.fail_after(START_TIMEOUT_S):
            await anyio.wait_readable(ours)
            hello = ours.recv(64).split()
        if hello[:1] != [b"ready"]:
            ours.close()
            raise RuntimeError(f"slot {index}'s zygote resident did not start (said {hello!r})")
        pid = int(hello[1])
        self.backend.cgroups[index].keep.add(pid)
        self.residents[index] = (ours, pid)
        return ours

    async def prepare(self, index: int) -> None:
        """Pre-fork slot `index`'s next sandbox (nothing but residents may be in its cgroup)."""
        old = self.prepared.pop(index, None)
        if old is not None:
            old.close()
        channel = await self._resident(index)
        host, sandbox = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            channel.sendmsg([b"prep"],
                            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [sandbox.fileno()]))])
        except OSError:
            host.close()
            self._drop_resident(index)
            raise
        finally:
            sandbox.close()
        host.setblocking(False)
        self.prepared[index] = host

    def _drop_resident(self, index: int) -> None:
        held = self.residents.pop(index, None)
        if held is not None:
            held[0].close()
            self.backend.cgroups[index].keep.discard(held[1])

    async def run(self, job: Job, index: int, folder: Path) -> ExecutionResult:
        backend = self.backend
        started = time.monotonic()
        try:
            if index not in self.prepared:
                await self.prepare(index)
            channel = self.prepared.pop(index)
            with anyio.fail_after(START_TIMEOUT_S):
                await anyio.wait_readable(channel)
            hello = channel.recv(256)
        except (OSError, RuntimeError, TimeoutError) as exc:
            log.error("sandbox.zygote_failed", error=repr(exc))
            await self._stop()
            return sandbox_failure(backend.name, f"warm python zygote: {exc!r}")
        if hello != b"ready\n":
            channel.close()
            return sandbox_failure(backend.name, f"warm sandbox did not start: {hello!r}")
        return await self._start(job, index, channel, started)

    async def _start(self, job: Job, index: int, channel: socket.socket, started: float) -> ExecutionResult:
        backend = self.backend
        cg = backend.cgroups[index]
        try:
            cg.start_job(job.limits.memory_mb, job.limits.pids, job.limits.cpus)
        except OSError as exc:
            channel.close()
            return sandbox_failure(backend.name, f"cgroup set-up of slot {index}: {exc}")
        self._write_request(job, index)
        (out_r, out_w), (err_r, err_w), (rep_r, rep_w) = (pipe() for _ in range(3))
        with open(backend.root / f"slot{index}.stdin", "wb+") as stdin:
            stdin.write(job.stdin)
            stdin.seek(0)
            fds = array.array("i", [stdin.fileno(), out_w, err_w, rep_w])
            try:
                channel.sendmsg([b"go"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            except OSError as exc:
                close_quietly(out_r, out_w, err_r, err_w, rep_r, rep_w)
                channel.close()
                return sandbox_failure(backend.name, f"warm sandbox is gone: {exc!r}")
        close_quietly(out_w, err_w, rep_w)
        status_fd = os.dup(channel.fileno())
        channel.close()
        seen, readers = await backend.watch(job, cg, started, (out_r, err_r, rep_r, status_fd))
        lines = readers[3].text().splitlines()
        ends = [int(line.split()[1]) for line in lines if line.startswith("exit ")]
        if ends and ends[0] >= 0:
            seen.exit_code, seen.signal = split_shell_code(ends[0])
        else:
            seen.signal = -ends[0] if ends else 9
        return backend.finish(job, seen)

    def _write_request(self, job: Job, index: int) -> None:
        limits = job.limits
        request = {
            "uid": self.backend.config.uid_base + index, "argv": job.command,
            "in_process": self.in_process(job),
            "env": job_env(self.env), "disk_bytes": limits.disk_mb * 1024 * 1024,
            "rlimits": {"RLIMIT_CPU": max(1, math.ceil(limits.cpu_s)),
                        "RLIMIT_FSIZE": limits.disk_mb * 1024 * 1024,
                        "RLIMIT_NOFILE": limits.nofile, "RLIMIT_CORE": 0}}
        path = self.backend.root / f"slot{index}.request.json"
        path.write_text(json.dumps(request))
        path.chmod(0o600)

    async def aclose(self) -> None:
        async with self.lock:
            await self._stop()

    async def _stop(self) -> None:
        for channel in self.prepared.values():
            channel.close()
        self.prepared.clear()
        for index in list(self.residents):
            self._drop_resident(index)
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            if self.proc.returncode is None:
                self.proc.kill()
            with anyio.CancelScope(shield=True):
                await self.proc.wait()
            self.proc = None
