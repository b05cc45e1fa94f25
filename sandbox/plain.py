"""The plain-subprocess backend: no isolation at all. Baseline for benchmarks and debugging.

Consumes a `Job`; writes its files to a fresh temp directory, runs its command there with a
wall-clock timeout and capped output, and returns an `ExecutionResult`. The job gets a
report pipe (its descriptor number in `WHET_REPORT_FD`; not renumbered to 3 here) whose
content comes back in `ExecutionResult.report`. It does NOT contain
anything a hostile job does (no namespaces, no cgroups, no uid change): never point it at
model output outside a benchmark.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import anyio

from bus.messages import ExecutionResult, Job
from sandbox.config import SandboxConfig


_REPORT_LIMIT = 8 * 1024 * 1024
"Most bytes of a job's report kept."


class PlainBackend:
    """The `subprocess` backend: a plain child process, no isolation (a benchmark baseline)."""

    name = "subprocess"

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config

    async def run(self, job: Job) -> ExecutionResult:
        root = self.config.workdir_root or None
        workdir = Path(tempfile.mkdtemp(prefix="whet-job-", dir=root))
        try:
            for name, data in job.files.items():
                path = workdir / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            return await self._run(job, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    async def _run(self, job: Job, workdir: Path) -> ExecutionResult:
        report_r, report_w = os.pipe()
        try:
            return await self._run_with_report(job, workdir, report_r, report_w)
        finally:
            os.close(report_r)

    async def _run_with_report(self, job: Job, workdir: Path, report_r: int,
                               report_w: int) -> ExecutionResult:
        limit = job.limits.output_bytes
        start = time.monotonic()
        usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            proc = await anyio.open_process(job.command, cwd=workdir, start_new_session=True,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, pass_fds=(report_w,),
                                            env={**os.environ, "WHET_REPORT_FD": str(report_w)})
        except OSError as exc:
            return ExecutionResult(status="nonzero_exit", exit_code=127, stderr=str(exc),
                                   backend=self.name)
        finally:
            os.close(report_w)  # the job holds its own copy; EOF comes when it lets go
        os.set_blocking(report_r, False)
        out, err, report = bytearray(), bytearray(), bytearray()

        async def read_report() -> None:
            while True:
                await anyio.wait_readable(report_r)
                chunk = os.read(report_r, 65536)
                if not chunk:
                    return
                report.extend(chunk[:max(_REPORT_LIMIT - len(report), 0)])
        status = None

        async def pump(stream, buf: bytearray) -> None:
            nonlocal status
            async for chunk in stream:
                buf.extend(chunk)
                if len(buf) > limit:
                    status = "output_limit"
                    _kill(proc)
                    return

        with anyio.move_on_after(job.limits.timeout_s) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(pump, proc.stdout, out)
                tg.start_soon(pump, proc.stderr, err)
                tg.start_soon(read_report)
                if job.stdin:
                    await proc.stdin.send(job.stdin)
                await proc.stdin.aclose()
            await proc.wait()
        if scope.cancelled_caught:
            status = "timeout"
            _kill(proc)
            with anyio.CancelScope(shield=True):
                await proc.wait()
        wall = time.monotonic() - start
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (usage.ru_utime - usage_before.ru_utime) + (usage.ru_stime - usage_before.ru_stime)
        code = proc.returncode
        if status is None:
            status = "ok" if code == 0 else ("killed" if code is not None and code < 0 else "nonzero_exit")
        return ExecutionResult(
            status=status,
            exit_code=code if code is not None and code >= 0 else None,
            signal=-code if code is not None and code < 0 else None,
            wall_s=wall, cpu_s=max(cpu, 0.0), peak_memory_mb=usage.ru_maxrss / 1024,
            stdout=bytes(out[:limit]).decode(errors="replace"),
            stderr=bytes(err[:limit]).decode(errors="replace"),
            stdout_truncated=len(out) > limit, stderr_truncated=len(err) > limit,
            report=bytes(report).decode(errors="replace"), backend=self.name)

    async def aclose(self) -> None:
        pass


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
