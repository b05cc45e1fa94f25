"""Sandboxes: run one `Job` in isolation and return an `ExecutionResult`.

`open_backend(config)` picks a `Backend` by name: `local` (bubblewrap + a cgroup per slot,
with the warm Python zygote), `docker` (a Docker-API engine, optionally with a warm pool),
or `subprocess` (no isolation: a benchmark baseline); `Metered` wraps one to count the CPU
its jobs use. A backend never raises for what the job did (timeouts, crashes, floods are
statuses); it reports its own failures as `status="sandbox_error"` with
`sandbox_failed=True`. Every backend honours the same conventions (`Backend`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the package stays importable without msgspec (sandbox.envbuild runs on bare CI)
    from bus.messages import ExecutionResult, Job
    from sandbox.config import SandboxConfig


class Backend(Protocol):
    """What every sandbox backend is: `run` one job, `aclose` when done; `name` for results.

    Conventions every backend honours (the judge relies on them):
    - the command runs in the folder holding `Job.files` (/work, read-only to the job);
    - /tmp (and /dev/shm) are the only writable places: fresh tmpfs of `limits.disk_mb`;
      HOME and TMPDIR are /tmp; stdin is `Job.stdin`;
    - fd 3 (`WHET_REPORT_FD=3`) is a pipe whose bytes, capped at `output_bytes`, come back as
      `ExecutionResult.report`;
    - `Job.command == []` means nothing to run: "ok" at once, no sandbox;
    - the job is a non-root uid with no capabilities and no_new_privs; Landlock works inside;
    - `runtime` names an environment spec (`sandbox.envs`): the same tree on every backend."""

    name: str

    async def run(self, job: Job) -> ExecutionResult: ...

    async def aclose(self) -> None: ...


class Metered:
    """A backend that adds each job's CPU seconds, as its own cgroup measured them, to
    `cpu_s`: sandboxed processes never show in the CPU counters of the process tree that
    started them, so this is where the cores they use are counted."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.name = backend.name
        self.cpu_s = 0.0

    async def run(self, job: Job) -> ExecutionResult:
        result = await self.backend.run(job)
        self.cpu_s += result.cpu_s
        return result

    async def aclose(self) -> None:
        await self.backend.aclose()


async def open_backend(config: SandboxConfig, slots: int = 1, run_id: str = "") -> Backend:
    """Create the backend `config.backend` names, able to run `slots` jobs at once.

    `run_id` labels what the backend leaves in shared places (docker containers), so a
    restarted instance can reap its own leftovers and no one else's."""
    if config.backend == "subprocess":
        from sandbox.plain import PlainBackend

        return PlainBackend(config)
    if config.backend == "local":
        from sandbox.local import LocalBackend

        return await LocalBackend.open(config, slots)
    if config.backend == "docker":
        from sandbox.docker import DockerBackend

        return await DockerBackend.open(config, slots, run_id)
    raise ValueError(f"sandbox backend {config.backend!r} is not available")
