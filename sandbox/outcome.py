"""Turning what a sandbox observed into an `ExecutionResult`: one rule set for every backend.

Consumes the raw observations of one job (exit code or signal, whether the deadline or the
output cap struck, the OOM counter, CPU and memory use, captured bytes); produces the
`ExecutionResult` with its status. Also the two results every backend returns without
running anything: an empty command ("nothing to run": ok) and a failure of the sandbox itself.
It does NOT observe anything itself.
"""

from __future__ import annotations

import signal as signals
from dataclasses import dataclass

import structlog

from bus.messages import ExecutionResult, Job

log = structlog.get_logger("sandbox")

CPU_LIMIT_SIGNALS = (signals.SIGKILL, signals.SIGXCPU)


@dataclass
class Observed:
    """What a backend saw of one job."""

    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    output_limited: bool = False
    oom: bool = False
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_memory_mb: float = 0.0
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    report: str = ""

    def take_output(self, out, err, report) -> None:
        """Copy what the capped readers of stdout, stderr and the report channel kept."""
        self.stdout, self.stderr, self.report = out.text(), err.text(), report.text()
        self.stdout_truncated, self.stderr_truncated = out.overflowed, err.overflowed


def status_of(seen: Observed, job: Job) -> str:
    """The status rule: OOM, then our deadline, then the output cap, then how it ended."""
    if seen.oom:
        return "oom"
    if seen.timed_out:
        return "timeout"
    if seen.output_limited:
        return "output_limit"
    if seen.signal is not None:
        # RLIMIT_CPU ends a process with SIGXCPU (soft) or SIGKILL (hard): a CPU timeout.
        if seen.signal in CPU_LIMIT_SIGNALS and seen.cpu_s >= job.limits.cpu_s * 0.95:
            return "timeout"
        return "killed"
    return "ok" if seen.exit_code == 0 else "nonzero_exit"


def result_of(seen: Observed, job: Job, backend: str) -> ExecutionResult:
    """The result of a job that ran."""
    return ExecutionResult(
        status=status_of(seen, job), exit_code=seen.exit_code, signal=seen.signal,
        wall_s=round(seen.wall_s, 6), cpu_s=round(seen.cpu_s, 6),
        peak_memory_mb=round(seen.peak_memory_mb, 3), stdout=seen.stdout, stderr=seen.stderr,
        stdout_truncated=seen.stdout_truncated, stderr_truncated=seen.stderr_truncated,
        report=seen.report, backend=backend)


def finished(seen: Observed, job: Job, backend: str) -> ExecutionResult:
    """`result_of`, with the one log line per job every backend writes."""
    result = result_of(seen, job, backend)
    log.info("sandbox.finished", backend=backend, status=result.status, exit_code=result.exit_code,
             wall_s=round(seen.wall_s, 3), cpu_s=round(seen.cpu_s, 3))
    return result


def split_shell_code(code: int) -> tuple[int | None, int | None]:
    """(exit code, signal) from a launcher that reports a signal as 128+N, like a shell."""
    if 128 < code <= 128 + 64:
        return None, code - 128
    return code, None


def nothing_to_run(backend: str) -> ExecutionResult:
    """An empty command: judged without execution, so it succeeds at once, sandbox-free."""
    return ExecutionResult(status="ok", exit_code=0, backend=backend)


def sandbox_failure(backend: str, what: str, wall_s: float = 0.0) -> ExecutionResult:
    """The sandbox itself failed: never the attempt's fault, never a reward."""
    return ExecutionResult(status="sandbox_error", sandbox_failed=True, sandbox_error=what,
                           wall_s=wall_s, backend=backend)


def bad_job(backend: str, what: str) -> ExecutionResult:
    """The job itself is malformed (e.g. a file name escaping its folder)."""
    return ExecutionResult(status="sandbox_error", sandbox_failed=False, sandbox_error=what,
                           backend=backend)


def safe_relative(name: str) -> bool:
    """True for a job file name that stays inside the job folder."""
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and all(p not in ("", ".", "..") for p in parts)
