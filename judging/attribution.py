"""Failure attribution: name why an attempt failed, the model or the infrastructure, with evidence.

Consumes the `ExecutionResult`, the harness's `Report` and the per-test results; produces a
`Cause`, or None when nothing failed. Model causes: `model.syntax_error`, `model.runtime_error`,
`model.wrong_answer`, `model.timeout`, `model.oom`, `model.output_limit`, `model.suspicious_exit`.
Infrastructure causes (never rewards) come only from evidence the candidate cannot produce: the
host's accounting of the job (sandbox failure, kill, memory, CPU time against wall time), the
harness's own `infra` records (`infra.reference`, `infra.spawn`, `infra.missing_dependency`) and
its crash. What the candidate or its children cause is the model's: a full pids limit or disk in
its own records, a module it imports, a call starved while the job kept its CPU busy outside the
candidate's calls. Hack signs are read before this (`judging.judgement`); it does NOT detect hacks.
"""

from __future__ import annotations

import math
import re
import signal
import sys
from dataclasses import dataclass

from bus.messages import ExecutionResult, Task
from judging.findings import ScoredTest
from judging.report import Report

STARVED = 0.5
"A call that waited to run for this share of its wall time (and longer than it ran) starved."
BUSY = 0.5
"A call (or a job) that ran on a CPU for at least this share of its wall time spun by itself."
OWN_LOAD = 0.25
("Share of the job's CPUs its processes used outside the candidate's measured calls (its "
 "children, say) from which a starved-looking call is the job's own doing, not the machine's.")
_RESOURCE_WORDS = re.compile(r"resource|exhausted|no space|enospc|eagain|cannot allocate|"
                             r"too many|pids|memory", re.I)
_EXHAUSTED = re.compile(r"EAGAIN|ENOSPC|Errno 11\b|Errno 28\b|Resource temporarily unavailable|"
                        r"No space left on device|BlockingIOError", re.I)
"A candidate's own record saying it ran out of processes or scratch disk: its own limits."
SELF_INFLICTED = ("infra.sandbox", "infra.resource_exhausted")
"Job-level causes that a candidate exhausting its own limits explains."
_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")
_JOB_OUTPUT = re.compile(r"without a status:.*", re.S)
"Where a backend's sandbox error quotes the job's own output, which is not the host's word."
_INFRA_RECORDS = {"reference": "infra.reference", "spawn": "infra.spawn",
                  "missing_dependency": "infra.missing_dependency"}


@dataclass(frozen=True)
class Cause:
    """Why an attempt ended as it did: a dotted cause ('infra.sandbox', 'model.timeout') and its evidence."""

    cause: str
    evidence: str

    @property
    def infra(self) -> bool:
        return self.cause.startswith("infra.")


def attribute(task: Task, result: ExecutionResult, report: Report,
              tests: list[ScoredTest]) -> Cause | None:
    """Why the attempt failed, or None if every counted test passed and the job ended well."""
    job = job_cause(result, report, task.limits.memory_mb, cpus=task.limits.cpus)
    if job is not None and job.cause in SELF_INFLICTED:
        own = next((t for t in tests if _EXHAUSTED.search(f"{t.record.get('etype', '')} {t.detail}")), None)
        if own is not None:
            return Cause("model.runtime_error", f"{own.id}: {own.detail[:300]}; it exhausted its own "
                         f"limits (processes or disk), and then: {job.evidence[:300]}")
    if job is not None:
        return job
    lost = reference_lost(tests)
    if lost is not None:
        return lost
    failing = [t for t in tests if t.passed is False]
    if any(t.status == "timeout" for t in failing):
        # Tests left unrun when the budget ran out are the consequence of the calls that
        # timed out, whose own evidence says whose fault that was.
        failing = [t for t in failing if t.status != "missing"]
    if any(t.status == "timeout" and t.record.get("limit") == "cpu" for t in failing):
        # A call that spent its CPU budget is slow by itself; calls later cut off by the
        # harness's deadline (which it ate) say nothing about the machine.
        failing = [t for t in failing if t.status != "timeout" or t.record.get("limit") == "cpu"]
    load = own_load(result, tests, task.limits.cpus)
    causes = [cause_of_test(t, task, result, load) for t in failing]
    for cause in causes:
        if cause.infra:
            return cause
    if causes:
        return causes[0]
    if result.status == "timeout":
        return after_report(result, tests, task.limits.cpus)
    return None


def job_cause(result: ExecutionResult, report: Report, memory_mb: int, *,
              cpus: float = 1.0) -> Cause | None:
    """A cause read from the job as a whole, before any test is looked at."""
    if result.sandbox_failed or result.status == "sandbox_error":
        host_words = _JOB_OUTPUT.sub("", result.sandbox_error)
        kind = "infra.resource_exhausted" if _RESOURCE_WORDS.search(host_words) else "infra.sandbox"
        return Cause(kind, f"sandbox failed: {result.sandbox_error or result.stderr[-300:]}")
    if report.crash:
        return Cause("infra.sandbox", f"harness crashed: {report.crash[-500:]}")
    if report.infra:
        what = next((w for w in report.infra_what if w in _INFRA_RECORDS), "missing_dependency")
        return Cause(_INFRA_RECORDS[what], "; ".join(report.infra)[:500])
    if report.ended:
        return None
    where = "before the harness started" if not report.started else "before the harness finished"
    usage = f"cpu {result.cpu_s:.2f} s of {result.wall_s:.2f} s wall"
    if result.status == "timeout":
        if report.started and share(result.cpu_s, result.wall_s, cpus) >= BUSY:
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


def share(cpu_s: float, wall_s: float, cpus: float) -> float:
    """CPU seconds per wall second per CPU the job may use (0 when nothing was measured)."""
    return cpu_s / (wall_s * max(cpus, 0.01)) if wall_s > 0 else 0.0


def own_load(result: ExecutionResult, tests: list[ScoredTest], cpus: float) -> float:
    """The share of the job's CPUs its processes used outside the candidate's calls, as the
    host counted them: the candidate's children, processes it left, the harness's own work."""
    calls = sum(_num(t.record.get("cpu_s")) for t in tests)
    return share(max(result.cpu_s - calls, 0.0), result.wall_s, cpus)


def after_report(result: ExecutionResult, tests: list[ScoredTest], cpus: float) -> Cause | None:
    """A job that timed out after a complete report in which nothing failed. Busy outside the
    tests' calls (work it left running, the host says): the tests decide, it passes. Idle:
    the machine held it up, so it is re-run; never a failure worth a full reward."""
    wall = max(result.wall_s - sum(_num(t.record.get("wall_s")) for t in tests), 1e-3)
    cpu = max(result.cpu_s - sum(_num(t.record.get("cpu_s")) for t in tests), 0.0)
    if share(cpu, wall, cpus) >= BUSY:
        return None
    return Cause("infra.cpu_starvation", f"the tests finished but the job ran past its deadline "
                 f"without using the CPU: cpu {cpu:.2f} s in the {wall:.2f} s of wall outside "
                 "the tests' calls")


def reference_lost(tests: list[ScoredTest]) -> Cause | None:
    """A robustness layer whose every test is invalid for a reason other than the reference's
    own error on its input: the reference did not run, which is the judge's fault."""
    mine = [t for t in tests if t.layer == "robustness"]
    if not mine or any(t.passed is not None for t in mine):
        return None
    foreign = [t for t in mine if not _reference_own_error(t.detail)]
    if not foreign:
        return None
    return Cause("infra.reference", f"every robustness test is invalid, the reference did not run: "
                 f"{foreign[0].id}: {foreign[0].detail[:300]}")


def _reference_own_error(detail: str) -> bool:
    """An exception raised in the reference's code (a traceback: the harness keeps only its first
    lines), its CPU budget spent, or an unencodable value: the reference's own doing on that input.
    Killed, exited, not loaded or out of wall time: it did not run as it should."""
    if detail.startswith("no input or no reference"):
        return True
    if not detail.startswith("reference: ") or "while loading" in detail:
        return False
    told = detail[len("reference: "):].lstrip()
    return told.startswith(("Traceback", "File ", "returned")) or told.endswith("s on a CPU")


def cause_of_test(t: ScoredTest, task: Task, result: ExecutionResult, load: float = 0.0) -> Cause:
    """The cause of one failed test, from its harness record; `load` is `own_load` of the job."""
    rec, s = t.record, t.status
    evidence = f"{t.id}: {t.detail}"[:800]
    if s in ("wrong", "fail", "unencodable"):
        return Cause("model.wrong_answer", evidence)
    if s == "error":
        return _error_cause(rec, task, evidence)
    if s == "timeout":
        return timeout_cause(rec, evidence, load)
    if s == "missing":
        if t.detail.startswith("not run") and share(result.cpu_s, result.wall_s, task.limits.cpus) < BUSY:
            return Cause("infra.cpu_starvation", f"{evidence}; cpu {result.cpu_s:.2f} s of {result.wall_s:.2f} s wall")
        return Cause("model.timeout" if t.detail.startswith("not run") else "infra.sandbox", evidence)
    if s == "malformed":
        return Cause("model.runtime_error", f"{evidence}: counted as the model's failure")
    if s == "exit":
        return Cause("model.suspicious_exit", evidence)
    if s == "killed":
        code = -_int(rec.get("exit_code"))
        if code == signal.SIGXCPU:
            return Cause("model.timeout", f"{evidence} (CPU-time limit)")
        if _num(rec.get("rss_mb")) >= 0.8 * task.limits.memory_mb:
            return Cause("model.oom", f"{evidence}, at {_num(rec.get('rss_mb'))} MB")
        return Cause("model.runtime_error", f"{t.id}: crashed with {_signame(code)}")
    if s == "output_limit":
        return Cause("model.output_limit", evidence)
    if s == "infra":
        return Cause("infra.missing_dependency", evidence)
    return Cause("infra.sandbox", f"{t.id}: unknown harness status {s!r}")


def timeout_cause(rec: dict, evidence: str, load: float = 0.0) -> Cause:
    """A call that ran out of time: spun, slept, or was starved of the CPU: by the machine,
    or (when `load` says the job's own processes kept its CPUs busy) by the candidate."""
    wall, cpu = _num(rec.get("wall_s")), _num(rec.get("cpu_s"))
    delay = rec.get("run_delay_s")
    delay = _num(delay) if isinstance(delay, (int, float)) and not isinstance(delay, bool) else None
    usage = f"cpu {cpu:.2f} s, waiting to run {delay if delay is not None else '?'} s, of {wall:.2f} s wall"
    if rec.get("limit") == "cpu":
        return Cause("model.timeout", f"{evidence}; spinning: {usage}")
    waited = delay if delay is not None else 0.0
    own = (f"{evidence}; starved by the job's own processes: {usage}, while they used "
           f"{load:.0%} of its CPUs outside the candidate's calls")
    if delay is not None and waited >= STARVED * wall and waited > cpu:
        return Cause("model.timeout" if load >= OWN_LOAD else "infra.cpu_starvation",
                     own if load >= OWN_LOAD else f"{evidence}; starved: {usage}")
    if cpu >= BUSY * wall or (delay is not None and cpu >= waited and cpu >= 0.1 * wall):
        # It ran at least as long as it waited: slow by itself, even on a busy machine.
        return Cause("model.timeout", f"{evidence}; spinning: {usage}")
    if delay is None:
        return Cause("model.timeout" if load >= OWN_LOAD else "infra.cpu_starvation",
                     own if load >= OWN_LOAD else f"{evidence}; cannot tell a wait from starvation: {usage}")
    return Cause("model.timeout", f"{evidence}; blocked or sleeping: {usage}")


def _error_cause(rec: dict, task: Task, evidence: str) -> Cause:
    etype = str(rec.get("etype", ""))
    detail = str(rec.get("detail", ""))
    if etype == "MemoryError":
        return Cause("model.oom", evidence)
    if etype in ("SyntaxError", "IndentationError", "TabError"):
        return Cause("model.syntax_error", evidence)
    if etype in ("ModuleNotFoundError", "ImportError") and rec.get("module_available") is False:
        # Only the harness's own look-up (outside the candidate) says the runtime lacks it.
        match = _MISSING_MODULE.search(detail)
        top = match.group(1).split(".")[0] if match else ""
        required = {m.strip() for m in str(task.verifier.extra.get("requires", "")).split(",")}
        if top and (top in sys.stdlib_module_names or top in required):
            return Cause("infra.missing_dependency", f"{evidence} (the runtime should provide {top!r})")
    return Cause("model.runtime_error", evidence)


def _num(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or abs(value) >= 1e15:
        return 0.0
    return float(value) if math.isfinite(value) else 0.0


def _int(value) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 1 << 16 else 0


def _signame(num: int | None) -> str:
    try:
        return signal.Signals(num).name if num else "a signal"
    except ValueError:
        return f"signal {num}"
