"""Run one job on an open backend, as the executor actor and `whet exec` both do.

Consumes an open backend (`sandbox.open_backend`) and a `Job`; produces its
`ExecutionResult`. A backend never raises for what a job did; should it raise for a bug of
its own, the job's result is a `sandbox_error` failure (`sandbox.outcome.sandbox_failure`),
so a request is never lost to it. It opens and closes no backend.
"""

from __future__ import annotations

import structlog

from bus.messages import ExecutionResult, Job
from sandbox.outcome import sandbox_failure

log = structlog.get_logger("sandbox.runner")


async def run_job(backend, job: Job) -> ExecutionResult:
    """Run one job; a backend bug becomes a sandbox failure, never a lost request."""
    try:
        return await backend.run(job)
    except Exception as exc:  # noqa: BLE001 - any backend bug is the sandbox's failure
        log.exception("exec.backend_failed", error=repr(exc))
        return sandbox_failure(getattr(backend, "name", "?"), f"backend error: {exc!r}")
