"""The harness's handle on one worker process: spawn, ask, wait with a deadline, measure, kill.

Consumes requests (dicts), a CPU budget and a deadline; produces `Reply` values: the
worker's answer, or what happened instead (timeout, exit, killed, output_limit), with the
wall time, the CPU time and the run-queue delay of the worker's threads over the request
(from /proc/<pid>/task/*/schedstat). A request times out when the worker has used its CPU
budget (slow by itself, on any machine) or at the deadline; at the deadline, a long
run-queue delay tells a program starved of the CPU by other work from one that slept. The worker's
stdout and stderr are read here: forwarded to the harness's own, up to a cap, or captured
(script mode). It does NOT decide what a reply means.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


class Reply:
    def __init__(self, status: str, data: dict | None = None, detail: str = "") -> None:
        self.status = status
        "'ok' (data holds the answer), 'timeout', 'exit', 'killed' or 'output_limit'."
        self.data = data or {}
        self.detail = detail
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.run_delay_s: float | None = None
        self.exit_code: int | None = None
        self.rss_mb = 0.0


class Channel:
    """One worker process; respawn by making another."""

    def __init__(self, mode: str, *, cwd: str, memory_mb: int, report_fd: int,
                 output_cap: int, printed: list[int], capture: bool = False,
                 stdin_path: str | None = None, site: bool = False) -> None:
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0",
               "PYTHONDONTWRITEBYTECODE": "1", "HOME": cwd, "TMPDIR": cwd, "LANG": "C.UTF-8"}
        stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            # Without site-packages unless the task requires a module from there (faster).
            [sys.executable, "-P", "-s", *(() if site else ("-S",)), os.path.join(HERE, "worker.py"),
             mode, str(req_r), str(resp_w), str(memory_mb), str(report_fd)],
            cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(req_r, resp_w), close_fds=True, start_new_session=True)
        if stdin_path:
            stdin.close()
        os.close(req_r)
        os.close(resp_w)
        self.capture = capture
        self.cap = output_cap
        self.printed = printed
        self.out = {self.proc.stdout.fileno(): bytearray(), self.proc.stderr.fileno(): bytearray()}
        self.sinks = {self.proc.stdout.fileno(): 1, self.proc.stderr.fileno(): 2}
        self.buf = b""
        self.alive = True

    def ask(self, request: dict | None, wall_s: float, cpu_s: float, wall_cap_s: float) -> Reply:
        """Send `request` (None: just wait for the next answer) and wait for the answer.

        It times out when the worker has run `cpu_s` seconds on a CPU, or after `wall_s`
        seconds. A slow program hits the CPU budget however busy the machine is; one that
        waits to run hits the wall limit with little CPU used, which is starvation. Where CPU
        time cannot be read, `wall_cap_s` bounds the wait instead."""
        before = _sched(self.proc.pid)
        start = time.monotonic()
        if request is not None:
            try:
                _write_all(self.req_w, (json.dumps(request) + "\n").encode())
            except OSError:
                pass  # the worker is gone; the wait below reports how it ended
        wall = max(wall_s, 0.0) if before else min(max(wall_s, 0.0), wall_cap_s)
        reply = self._wait(start + wall, before, cpu_s)
        reply.wall_s = time.monotonic() - start
        after = _sched(self.proc.pid) if self.alive else None
        if before and after:
            reply.cpu_s = max(after[0] - before[0], 0.0)
            reply.run_delay_s = max(after[1] - before[1], 0.0)
        if reply.status == "timeout":
            self.kill()
        return reply

    def _wait(self, deadline: float, before: tuple[float, float] | None, cpu_s: float) -> Reply:
        fds = [self.resp_r, *self.out]
        cpu_left = cpu_s
        while True:
            line, sep, rest = self.buf.partition(b"\n")
            if sep:
                self.buf = rest
                try:
                    return Reply("ok", json.loads(line))
                except ValueError:
                    continue  # garbage written into the channel by the program: ignored
            left = deadline - time.monotonic()
            if left <= 0:
                return Reply("timeout", {"limit": "wall"}, "no answer before the deadline")
            if before is not None:
                now = _sched(self.proc.pid)
                cpu_left = cpu_s - (now[0] - before[0]) if now else cpu_left
                if cpu_left <= 0:
                    return Reply("timeout", {"limit": "cpu"}, f"no answer after {cpu_s:.2f} s on a CPU")
                left = min(left, max(cpu_left, 0.005))  # CPU time cannot outrun wall time (one thread)
            ready, _, _ = select.select(fds, [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if fd == self.resp_r:
                    if not chunk:
                        return self._ended(deadline)
                    self.buf += chunk
                elif chunk and not self._take_output(fd, chunk):
                    self.kill()
                    return Reply("output_limit", detail=f"printed more than {self.cap} bytes")
                elif not chunk:
                    fds.remove(fd)

    def _take_output(self, fd: int, chunk: bytes) -> bool:
        held = self.out[fd]
        room = self.cap - (len(held) if self.capture else self.printed[0])
        if room <= 0:
            return False
        held.extend(chunk[:room])
        if not self.capture:
            self.printed[0] += min(len(chunk), room)
            _write_all(self.sinks[fd], chunk[:room])
        return len(chunk) <= room

    def _ended(self, deadline: float) -> Reply:
        # The answer channel closed: the worker is exiting, or the program closed it and
        # runs on; the latter is killed at the deadline.
        self.alive = False
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.killpg(self.proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(self.proc.pid, 0)
                break
            time.sleep(0.002)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self._drain_output()
        code = self.proc.returncode
        reply = Reply("killed" if code < 0 else "exit",
                      detail=f"signal {-code}" if code < 0 else f"exit code {code}")
        reply.exit_code = code
        reply.rss_mb = usage.ru_maxrss / 1024
        return reply

    def _drain_output(self) -> None:
        for fd in list(self.out):
            while select.select([fd], [], [], 0.05)[0]:
                chunk = os.read(fd, 65536)
                if not chunk or not self._take_output(fd, chunk):
                    break

    def output(self) -> tuple[str, str, bool]:
        """(stdout, stderr, truncated) captured so far."""
        out, err = (bytes(b).decode(errors="replace") for b in self.out.values())
        return out, err, any(len(b) >= self.cap for b in self.out.values())

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait()
        self.alive = False

    def close(self) -> None:
        self.kill()
        for fd in (self.req_w, self.resp_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc.stdout.close()
        self.proc.stderr.close()


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _sched(pid: int) -> tuple[float, float] | None:
    """(on-CPU seconds, run-queue seconds) summed over the process's threads, if readable."""
    cpu = delay = 0.0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                on_cpu, waited, _ = f.read().split()
            cpu += int(on_cpu) / 1e9
            delay += int(waited) / 1e9
    except (OSError, ValueError):
        return None
    return cpu, delay
