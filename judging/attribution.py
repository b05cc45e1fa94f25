"""Failure attribution: name why an attempt failed, the model or the infrastructure, with evidence.

Consumes the `ExecutionResult`, the harness's `Report` and the per-test results; produces a
`Cause`, or None when nothing failed. Model causes: `model.syntax_error`,
`model.runtime_error`, `model.wrong_answer`, `model.timeout` (its own loop or wait),
`model.oom` (its own allocation), `model.output_limit`, `model.suspicious_exit`.
Infrastructure causes, which must never become rewards: `infra.sandbox` (launcher, daemon,
harness), `infra.resource_exhausted` (by other jobs), `infra.executor_killed`,
`infra.cpu_starvation`, `infra.missing_dependency`. (The model judge's outages are
`infra.model_judge`, in `judging.model_judge`: they too never become rewards.)

CPU starvation is told apart from a slow program by how the call ended: a call that used its
CPU budget is slow by itself however busy the machine was; one that reached the deadline
having waited to run more than it ran (the run-queue delay the harness measured) was
starved. At job level, CPU time against wall time decides. Where neither settles it, the
doubt goes to infrastructure, so the attempt is re-run rather than punished. It does NOT detect hacks (`judging.hacks`).
"""

from __future__ import annotations

import re
import signal
import sys
from dataclasses import dataclass

from bus.messages import ExecutionResult, Task
from judging.layers import ScoredTest
from judging.report import Report

STARVED = 0.5
"A call that waited to run for this share of its wall time (and longer than it ran) starved."
BUSY = 0.5
"A call that ran on a CPU for at least this share of its wall time spun by itself."
_RESOURCE_WORDS = re.compile(r"resource|exhausted|no space|enospc|eagain|cannot allocate|"
                             r"too many|pids|memory", re.I)
_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


@dataclass(frozen=True)
class Cause:
    cause: str
    evidence: str

    @property
    def infra(self) -> bool:
        return self.cause.startswith("infra.")


def attribute(task: Task, result: ExecutionResult, report: Report,
              tests: list[ScoredTest]) -> Cause | None:
    """Why the attempt failed, or None if every counted test passed and the job ended well."""
    job = job_cause(result, report, task.limits.memory_mb)
    if job is not None:
        return job
    failing = [t for t in tests if t.passed is False]
    if any(t.status == "timeout" for t in failing):
        # Tests left unrun when the budget ran out are the consequence of the calls that
        # timed out, whose own evidence says whose fault that was.
        failing = [t for t in failing if t.status != "missing"]
    if any(t.status == "timeout" and t.record.get("limit") == "cpu" for t in failing):
        # A call that spent its CPU budget is slow by itself; calls later cut off by the
        # harness's deadline (which it ate) say nothing about the machine.
        failing = [t for t in failing if t.status != "timeout" or t.record.get("limit") == "cpu"]
    causes = [cause_of_test(t, task, result) for t in failing]
    for cause in causes:
        if cause.infra:
            return cause
    if causes:
        return causes[0]
    if result.status == "timeout":
        return Cause("model.timeout", "the tests finished but the job did not end: it left "
                     f"processes running ({result.wall_s:.1f} s wall)")
    return None


def job_cause(result: ExecutionResult, report: Report, memory_mb: int) -> Cause | None:
    """A cause read from the job as a whole, before any test is looked at."""
    if result.sandbox_failed or result.status == "sandbox_error":
        kind = "infra.resource_exhausted" if _RESOURCE_WORDS.search(result.sandbox_error) else "infra.sandbox"
        return Cause(kind, f"sandbox failed: {result.sandbox_error or result.stderr[-300:]}")
    if report.crash:
        return Cause("infra.sandbox", f"harness crashed: {report.crash[-500:]}")
    if report.infra:
        return Cause("infra.missing_dependency", "; ".join(report.infra)[:500])
    if report.ended:
        return None
    where = "before the harness started" if not report.started else "before the harness finished"
    usage = f"cpu {result.cpu_s:.2f} s of {result.wall_s:.2f} s wall"
    if result.status == "timeout":
        if report.started and result.cpu_s >= BUSY * result.wall_s:
            return Cause("model.timeout", f"job timed out {where}, busy: {usage}")
        return Cause("infra.cpu_starvation", f"job timed out {where} without using the CPU: {usage}")
    if result.status == "killed":
        sig = _signame(result.signal)
        return Cause("infra.executor_killed", f"job killed by {sig} {where}, not by its limits")
    if result.status == "oom":
        if report.started and result.peak_memory_mb >= 0.5 * memory_mb:
            return Cause("model.oom", f"out of memory {where}: peak {result.peak_memory_mb:.0f} MB of {memory_mb} MB")
        return Cause("infra.resource_exhausted", f"killed for memory {where} at "
                     f"{result.peak_memory_mb:.0f} MB of its {memory_mb} MB: the host ran out")
    if result.status == "output_limit":
        return Cause("model.output_limit", f"printed past the output limit {where}")
    if not report.started:
        if result.exit_code == 127 or "No such file" in result.stderr or "not found" in result.stderr:
            return Cause("infra.missing_dependency", f"runtime cannot start the harness: {result.stderr[-300:]}")
        return Cause("infra.sandbox", f"no report from the harness (exit {result.exit_code}): {result.stderr[-300:]}")
    if result.exit_code == 0:
        return None  # an unfinished report that claims success: a hack, for judging.hacks
    return Cause("infra.sandbox", f"harness ended with exit {result.exit_code} {where}: {result.stderr[-300:]}")


def cause_of_test(t: ScoredTest, task: Task, result: ExecutionResult) -> Cause:
    """The cause of one failed test, from its harness record."""
    rec, s = t.record, t.status
    evidence = f"{t.id}: {t.detail}"[:800]
    if s in ("wrong", "fail", "unencodable"):
        return Cause("model.wrong_answer", evidence)
    if s == "error":
        return _error_cause(rec, task, evidence)
    if s == "timeout":
        return timeout_cause(rec, evidence)
    if s == "missing":
        if t.detail.startswith("not run") and result.cpu_s < BUSY * result.wall_s:
            return Cause("infra.cpu_starvation", f"{evidence}; cpu {result.cpu_s:.2f} s of {result.wall_s:.2f} s wall")
        return Cause("model.timeout" if t.detail.startswith("not run") else "infra.sandbox", evidence)
    if s == "exit":
        return Cause("model.suspicious_exit", evidence)
    if s == "killed":
        code = -int(rec.get("exit_code", 0) or 0)
        if code == signal.SIGXCPU:
            return Cause("model.timeout", f"{evidence} (CPU-time limit)")
        if float(rec.get("rss_mb", 0)) >= 0.8 * task.limits.memory_mb:
            return Cause("model.oom", f"{evidence}, at {rec.get('rss_mb')} MB")
        return Cause("model.runtime_error", f"{t.id}: crashed with {_signame(code)}")
    if s == "output_limit":
        return Cause("model.output_limit", evidence)
    if s == "infra":
        return Cause("infra.missing_dependency", evidence)
    return Cause("infra.sandbox", f"{t.id}: unknown harness status {s!r}")


def timeout_cause(rec: dict, evidence: str) -> Cause:
    """A call that ran out of time: spun, slept, or was starved of the CPU."""
    wall = float(rec.get("wall_s", 0.0))
    cpu = float(rec.get("cpu_s", 0.0))
    delay = rec.get("run_delay_s")
    usage = f"cpu {cpu:.2f} s, waiting to run {delay if delay is not None else '?'} s, of {wall:.2f} s wall"
    if rec.get("limit") == "cpu":
        return Cause("model.timeout", f"{evidence}; spinning: {usage}")
    waited = float(delay) if delay is not None else 0.0
    if delay is not None and waited >= STARVED * wall and waited > cpu:
        return Cause("infra.cpu_starvation", f"{evidence}; starved: {usage}")
    if cpu >= BUSY * wall or (delay is not None and cpu >= waited and cpu >= 0.1 * wall):
        # It ran at least as long as it waited: slow by itself, even on a busy machine.
        return Cause("model.timeout", f"{evidence}; spinning: {usage}")
    if delay is None:
        return Cause("infra.cpu_starvation", f"{evidence}; cannot tell a wait from starvation: {usage}")
    return Cause("model.timeout", f"{evidence}; blocked or sleeping: {usage}")


def _error_cause(rec: dict, task: Task, evidence: str) -> Cause:
    etype = str(rec.get("etype", ""))
    detail = str(rec.get("detail", ""))
    if etype == "MemoryError":
        return Cause("model.oom", evidence)
    if etype in ("SyntaxError", "IndentationError", "TabError"):
        return Cause("model.syntax_error", evidence)
    if etype in ("ModuleNotFoundError", "ImportError"):
        match = _MISSING_MODULE.search(detail)
        top = match.group(1).split(".")[0] if match else ""
        required = {m.strip() for m in task.verifier.extra.get("requires", "").split(",")}
        if top and (top in sys.stdlib_module_names or top in required):
            return Cause("infra.missing_dependency", f"{evidence} (the runtime should provide {top!r})")
    return Cause("model.runtime_error", evidence)


def _signame(num: int | None) -> str:
    try:
        return signal.Signals(num).name if num else "a signal"
    except ValueError:
        return f"signal {num}"
