"""The docker backend's warm pool: jobs run in containers that are already running.

Consumes jobs of a docker slot that has (or gets) a warm container with the job's runtime and
limits; produces `ExecutionResult`s like the cold path. Each warm container is created like a
cold one (same HostConfig) but its pid 1 is a small runner (`WarmPool`). A container is
replaced (never reused) when its job timed out, flooded, or ended without a clean `exit`
line: whatever the job did to the container goes with it. It does NOT share a container
between slots, so concurrent jobs never see each other.
"""

from __future__ import annotations

import errno
import os
import re
import time
from pathlib import Path

import aiodocker
import anyio
import structlog

from bus.messages import ExecutionResult, Job, Limits
from sandbox.docker_io import DRAIN_S, IO, JobChannels, remove_container
from sandbox.outcome import Observed, sandbox_failure

log = structlog.get_logger("sandbox.docker_pool")
WARM_WRAPPER = "\n".join([
    f'exec 3>{IO}/report 4>{IO}/status 5>{IO}/stderr >{IO}/stdout || exit 125',
    'exec 2>/dev/null',
    # In the background so the shell's own "Killed" notice goes to /dev/null, not the job's stderr.
    f'"$@" <{IO}/stdin 2>&5 4>&- 5>&- & wait $!; rc=$?',
    "exec 3>&- 5>&- >/dev/null </dev/null",
    "kill -9 -1; kill -9 -1",
    "chmod -R u+rwx /tmp /dev/shm; rm -rf /tmp/* /tmp/.[!.]* /tmp/..?* /dev/shm/* /dev/shm/.[!.]* /dev/shm/..?*",
    "state=dirty",
    # The runner and this shell: anything more is a survivor (zombies wait for the runner).
    "for i in 1 2 3 4 5 6 7 8 9 10; do set -- /proc/[0-9]*",
    '  if [ $# -le 2 ] && [ -z "$(ls -A /tmp)$(ls -A /dev/shm)" ]; then state=exit; break; fi',
    "  sleep 0.02; done",
    'echo "$state $rc" >&4',
])
"Runs the job, then cleans the container; says 'exit N' when it is clean again, else 'dirty N'."
RUNNER = "\n".join([
    # No traps: ignored signals would be inherited by jobs; as pid 1 it gets none anyway.
    "while :; do",
    f"  read -r _ < {IO}/go || {{ sleep 0.05; continue; }}",
    f"  mapfile -d '' -t argv < {IO}/argv",
    '  env -u SHLVL -u _ setpriv --reuid="$1" --regid="$1" --clear-groups --no-new-privs \\',
    '    /bin/sh -c "$2" whet "${argv[@]}"',
    "done",
])
"pid 1 of a warm container: $1 is the slot uid, $2 the wrapper. Reaps orphans as init does."
GO_TIMEOUT_S = 15.0
EXIT_LINE = re.compile(rb"(exit|dirty) (-?\d+)\n?$")


class WarmPool:
    """One warm container per slot, kept while jobs' runtime and limits match it.

    Its pid 1 is a small bash runner, root with only CAP_SETUID and CAP_SETGID (every other
    capability dropped). The host starts a job by writing to the slot's `go` FIFO (no engine API
    call, no `runc exec`); the runner drops to the slot uid with no_new_privs (`setpriv`, which
    clears those two capabilities too) and runs a wrapper that runs the command, then kills
    every process of the slot uid (setsid orphans included; the root runner cannot be signalled
    or traced by them), empties /tmp and /dev/shm, checks that nothing is left, and only then
    writes `exit N` on the status FIFO."""

    def __init__(self, backend, size: int) -> None:
        self.backend = backend
        self.size = size
        self.containers: dict[int, tuple[object, tuple[str, Limits]]] = {}

    def accepts(self, job: Job) -> bool:
        return True  # any job of a pool slot; a slot whose container differs gets a new one

    async def _container(self, job: Job, index: int):
        key = (job.runtime, job.limits)
        held = self.containers.get(index)
        if held is not None and held[1] == key:
            return held[0]
        await self.replace(index)
        backend = self.backend
        uid = str(backend.config.uid_base + index)
        config = backend.container_config(job, index, ["/bin/bash", "-c", RUNNER, "runner", uid, WARM_WRAPPER],
                                          await backend.image(job.runtime))
        config["User"] = "0:0"
        config["HostConfig"].update(Init=False, CapAdd=["SETUID", "SETGID"])
        container = await backend.docker.containers.create(config)
        await container.start()
        self.containers[index] = (container, key)
        return container

    async def replace(self, index: int) -> None:
        held = self.containers.pop(index, None)
        if held is not None:
            with anyio.CancelScope(shield=True):
                await remove_container(held[0])

    async def run(self, job: Job, index: int) -> ExecutionResult:
        backend = self.backend
        started = time.monotonic()
        if index >= self.size:
            return await backend._run_cold(job, index, await backend.image(job.runtime))
        uid = backend.config.uid_base + index
        channels = JobChannels(backend.slot_dirs(index)[1], uid, job.stdin)
        seen = Observed()
        ended = False
        try:
            container = await self._container(job, index)
            cg = backend.start_accounting(index, job.limits)
            oom_before = _oom_kills(backend, index, container.id)
            readers = backend._readers(job, channels, seen, container)
            io = backend.slot_dirs(index)[1]
            (io / "argv").write_bytes(b"".join(arg.encode() + b"\0" for arg in job.command))
            async with anyio.create_task_group() as tg:
                for reader in readers:
                    tg.start_soon(reader.run)
                await self._go(io)
                with anyio.move_on_after(job.limits.timeout_s) as deadline:
                    while not (seen.output_limited or readers[3].line.is_set() or readers[3].eof.is_set()):
                        with anyio.move_on_after(0.25):
                            await readers[3].eof.wait()
                seen.timed_out = deadline.cancelled_caught
                if readers[3].line.is_set() and not (seen.timed_out or seen.output_limited):
                    # The next job's status reader must not meet this wrapper on the reused FIFO.
                    with anyio.move_on_after(DRAIN_S):
                        await readers[3].eof.wait()
                match = EXIT_LINE.search(bytes(readers[3].data))
                ended = match is not None and not seen.timed_out and not seen.output_limited
                clean = ended and match.group(1) == b"exit" and readers[3].eof.is_set()
                if not clean:
                    await self.replace(index)  # kills every process of the job with it
                channels.release()
                with anyio.move_on_after(DRAIN_S):
                    for reader in readers[:3]:
                        await reader.eof.wait()
                tg.cancel_scope.cancel()
            oom = _oom_kills(backend, index, container.id) > oom_before if ended else False
        except (aiodocker.DockerError, OSError) as exc:
            await self.replace(index)
            return sandbox_failure(backend.name, f"warm container: {exc}", time.monotonic() - started)
        finally:
            channels.close()
        seen.wall_s = time.monotonic() - started
        code = int(match.group(2)) if ended else None
        if not ended and not seen.timed_out and not seen.output_limited:
            seen.signal = 9  # the job took its wrapper down with it
        return backend.conclude(job, seen, readers, cg, code, oom)

    async def _go(self, io: Path) -> None:
        """Wake the slot's runner (it waits in `read < go`, which counts as a reader)."""
        go = io / "go"
        if not go.exists():
            os.mkfifo(go, 0o600)
        deadline = time.monotonic() + GO_TIMEOUT_S
        while True:
            try:
                fd = os.open(go, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as exc:
                if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                    raise OSError(exc.errno, f"the warm container's runner is not listening: {exc}")
                await anyio.sleep(0.002)  # still cleaning up after the previous job
        try:
            os.write(fd, b"go\n")
        finally:
            os.close(fd)

    async def aclose(self) -> None:
        for index in list(self.containers):
            await self.replace(index)


def _oom_kills(backend, index: int, container_id: str) -> int:
    """OOM kills in the container's own memory cgroup (v1 counts them per cgroup only)."""
    layout = backend.layout
    if layout is None:
        return 0
    name, file = ("memory", "memory.oom_control") if layout.mode == "v1" else ("unified", "memory.events")
    path = layout.roots[name] / backend.group / f"slot{index}" / container_id / file
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except OSError:
        pass
    return 0
