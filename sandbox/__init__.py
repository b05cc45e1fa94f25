"""Sandboxes: run one `Job` in isolation and return an `ExecutionResult`.

Every backend has the same shape:

    class Backend(Protocol):
        name: str
        async def run(self, job: Job) -> ExecutionResult: ...
        async def aclose(self) -> None: ...

`open_backend(config)` picks one by name. A backend never raises for what the job did
(timeouts, crashes, floods are statuses); it reports its own failures as
`status="sandbox_error"` with `sandbox_failed=True`.
"""

from __future__ import annotations

from typing import Protocol

from bus.messages import ExecutionResult, Job
from sandbox.config import SandboxConfig


class Backend(Protocol):
    name: str

    async def run(self, job: Job) -> ExecutionResult: ...

    async def aclose(self) -> None: ...


async def open_backend(config: SandboxConfig) -> Backend:
    """Create the backend `config.backend` names."""
    if config.backend == "subprocess":
        from sandbox.plain import PlainBackend

        return PlainBackend(config)
    raise ValueError(f"sandbox backend {config.backend!r} is not available")
