"""The harness's handle on one worker process: spawn, ask, wait with a deadline, measure, kill.

Consumes requests (dicts), a CPU budget and a deadline; produces `Reply` values: the one
well-formed answer to the request (its `seq` echoed, its fields of the right types; a line
left over from an earlier request shows up before it, and `settle` pings once before a worker
is closed), `forged` when anything else came on the answer pipe, or what
happened instead (timeout, exit, killed, output_limit), with wall time, CPU time and run-queue
delay of the worker's threads (/proc/<pid>/task/*/schedstat; a long delay at the deadline
is starvation, not slowness). A candidate worker in a namespace of its own is measured and
killed by its inner pid. Worker stdout and stderr are forwarded up to a cap, or captured
(script mode). It never raises on what a worker writes, and does NOT decide what a reply means.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import wire

HERE = os.path.dirname(os.path.abspath(__file__))
ANSWER_CAP = 64 << 20
"Bytes of one answer line at most (an encoded value is bounded in parts, not in size)."
_FIELDS = {"seq": int, "audit": list, "patched": list, "hello": bool, "landlock": str,
           "isolation": str, "ok": bool, "value": object, "etype": str, "error": str, "tb": str,
           "module": str, "exit": int, "finished": bool, "unencodable": str,
           "eq_override": bool, "pong": bool}
_SHAPES = {None: {"hello"}, "load": {"ok", "error", "exit"}, "call": {"value", "error", "unencodable", "exit"},
           "script": {"exit", "error"}, "ping": {"pong"}}
"Which kinds of answer each request may get (None: the worker's hello)."


class Reply:
    """A worker's answer to one operation, or how the worker ended instead, with its time and CPU."""

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
        self.forged = ""
        "What came on the answer pipe that was not the one well-formed answer ('' if nothing)."


class Channel:
    """One worker process; respawn by making another."""

    def __init__(self, mode: str, *, cwd: str, memory_mb: int, report_fd: int,
                 output_cap: int, printed: list[int], capture: bool = False,
                 stdin_path: str | None = None, site: bool = False, ns: str = "-") -> None:
        """Spawn the worker (OSError when it cannot be); `ns` is the candidate's namespace
        request for worker.py ('-' none, else its RLIMIT_NPROC, '!' when required)."""
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0",
               "PYTHONDONTWRITEBYTECODE": "1", "HOME": cwd, "TMPDIR": cwd, "LANG": "C.UTF-8"}
        stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                # Without site-packages unless the task requires a module from there (faster).
                [sys.executable, "-P", "-s", *(() if site else ("-S",)), os.path.join(HERE, "worker.py"),
                 mode, str(req_r), str(resp_w), str(memory_mb), str(report_fd), ns],
                cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=(req_r, resp_w), close_fds=True, start_new_session=True)
        except BaseException:
            for fd in (req_r, resp_w, self.req_w, self.resp_r):
                os.close(fd)
            raise
        finally:
            if stdin_path:
                stdin.close()
        os.close(req_r)
        os.close(resp_w)
        self.pid = self.proc.pid
        "The process that runs the program: the worker, or its child in a namespace of its own."
        self.isolation = ""
        self.seq = 0
        self.closed = False
        self.capture = capture
        self.cap = output_cap
        self.printed = printed
        self.out = {self.proc.stdout.fileno(): bytearray(), self.proc.stderr.fileno(): bytearray()}
        self.sinks = {self.proc.stdout.fileno(): 1, self.proc.stderr.fileno(): 2}
        self.buf = b""
        self.alive = True

    def ask(self, request: dict | None, wall_s: float, cpu_s: float, wall_cap_s: float) -> Reply:
        """Send `request` (None: just wait for the worker's hello) and wait for its answer.

        It times out when the worker has run `cpu_s` seconds on a CPU, or after `wall_s`
        seconds. A slow program hits the CPU budget however busy the machine is; one that
        waits to run hits the wall limit with little CPU used, which is starvation. Where CPU
        time cannot be read, `wall_cap_s` bounds the wait instead."""
        start = time.monotonic()
        pid = self.pid
        before = _sched(pid)
        deadline = start + (max(wall_s, 0.0) if before else min(max(wall_s, 0.0), wall_cap_s))
        reply = self._exchange(request, deadline, before, cpu_s)
        if pid != self.pid:
            before = None  # the hello came from the namespace's child: nothing to compare
        reply.wall_s = time.monotonic() - start
        after = _sched(self.pid) if self.alive else None
        if before and after:
            reply.cpu_s = max(after[0] - before[0], 0.0)
            reply.run_delay_s = max(after[1] - before[1], 0.0)
        if reply.status in ("timeout", "forged", "output_limit"):
            self.kill()
        return reply

    def _exchange(self, request: dict | None, deadline: float, before, cpu_s: float) -> Reply:
        op = None
        if request is not None:
            self.seq += 1
            op = request["op"]
            try:
                _write_all(self.req_w, (json.dumps({**request, "seq": self.seq}) + "\n").encode())
            except OSError:
                pass  # the worker is gone; the wait below reports how it ended
        while True:
            reply = self._wait(deadline, before, cpu_s)
            if reply.status != "line":
                return reply
            data, bad = _parse(reply.data["line"])
            if request is None and not bad and self.pid == self.proc.pid and set(data) == {"seq", "ns_pid"} \
                    and data["seq"] == 0 and type(data["ns_pid"]) is int and data["ns_pid"] > 0:
                # The worker's own first line, before any program runs: the candidate's pid.
                self.pid = data["ns_pid"]
                before = _sched(self.pid)
                continue
            bad = bad or _misshapen(data, self.seq, op)
            if bad:
                forged = Reply("forged", detail=f"the answer pipe carried {bad}")
                forged.forged = bad
                return forged
            if request is None:
                self.isolation = data.get("isolation", "")
            return Reply("ok", data)

    def _wait(self, deadline: float, before: tuple[float, float] | None, cpu_s: float) -> Reply:
        """The next whole line on the answer pipe (status 'line'), or how the wait ended."""
        fds = [self.resp_r, *self.out]
        cpu_left = cpu_s
        while True:
            line, sep, rest = self.buf.partition(b"\n")
            if sep:
                self.buf = rest
                return Reply("line", {"line": line})
            if len(self.buf) > ANSWER_CAP:
                return Reply("output_limit", detail=f"an answer longer than {ANSWER_CAP} bytes")
            left = deadline - time.monotonic()
            if left <= 0:
                return Reply("timeout", {"limit": "wall"}, "no answer before the deadline")
            if before is not None:
                now = _sched(self.pid)
                cpu_left = cpu_s - (now[0] - before[0]) if now else cpu_left
                if cpu_left <= 0:
                    return Reply("timeout", {"limit": "cpu"}, f"no answer after {cpu_s:.2f} s on a CPU")
                left = min(left, max(cpu_left, 0.005))  # CPU time cannot outrun wall time (one thread)
            ready, _, _ = select.select(fds, [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if fd == self.resp_r:
                    if not chunk:
                        self.buf = b""  # a line cut off by the end of the process is no answer
                        return self._ended(deadline)
                    self.buf += chunk
                elif chunk and not self._take_output(fd, chunk):
                    self.kill()
                    return Reply("output_limit", detail=f"printed more than {self.cap} bytes")
                elif not chunk:
                    fds.remove(fd)

    def settle(self, wall_s: float) -> str:
        """The barrier before a live worker is closed: a ping it answers only after every
        answer before it, so a line the program wrote on its own since shows up now.
        What was forged ('' if nothing); a worker that does not answer is simply closed."""
        reply = self._exchange({"op": "ping"}, time.monotonic() + max(wall_s, 0.05), _sched(self.pid), wall_s)
        return reply.forged

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
                self._signal_all()
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

    def _signal_all(self) -> None:
        # The program's own pid first (pid 1 of its namespace: everything it forked dies
        # with it, and it may have left the worker's process group), then the group.
        for kill, target in ((os.kill, self.pid), (os.killpg, self.proc.pid)):
            try:
                kill(target, signal.SIGKILL)
            except OSError:
                pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            if self.pid != self.proc.pid:
                # The namespace's pid 1 first: the relay exits once the kernel has killed
                # and reaped everything in it, so its pids, memory and CPU are free after.
                try:
                    os.kill(self.pid, signal.SIGKILL)
                    self.proc.wait(timeout=2.0)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._signal_all()
            self.proc.wait()
        elif self.pid != self.proc.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)  # a relay killed first leaves its child running
            except OSError:
                pass
        self.alive = False

    def close(self) -> None:
        if self.closed:
            return  # each descriptor is closed once: its number may be another's by now
        self.closed = True
        self.kill()
        for fd in (self.req_w, self.resp_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc.stdout.close()
        self.proc.stderr.close()


def _parse(line: bytes) -> tuple[dict, str]:
    """The record on one answer line, or what is wrong with it."""
    try:
        data = json.loads(line)
    except Exception:  # noqa: BLE001 - ValueError, RecursionError: not an answer either way
        return {}, "a line that is not JSON"
    if type(data) is not dict:
        return {}, f"a JSON {type(data).__name__}, not a record"
    return data, ""


def _misshapen(d: dict, seq: int, op: str | None) -> str:
    """'' when `d` is the well-formed answer to request `seq` of kind `op`, else what is wrong."""
    for key, value in d.items():
        kind = _FIELDS.get(key)
        if kind is None:
            return f"an answer with an unknown field {key[:40]!r}"
        if kind is not object and type(value) is not kind:
            return f"an answer whose {key!r} is a {type(value).__name__}"
    if not {"seq", "audit", "patched"} <= set(d):
        return "an answer without its sequence number or audit"
    if d["seq"] != seq:
        return f"an answer numbered {str(d.get('seq'))[:20]} to request {seq}"
    if not all(type(x) is str for x in d.get("audit", ())) or not all(type(x) is str for x in d.get("patched", ())) \
            or len(d.get("audit", ())) > 32 or len(d.get("patched", ())) > 64:
        return "an answer with a malformed audit"
    shape = ("hello" if "hello" in d else "pong" if "pong" in d else "exit" if "exit" in d
             else "unencodable" if "unencodable" in d else "error" if d.get("ok") is False
             else "value" if "value" in d else "ok" if d.get("ok") is True else "")
    if shape not in _SHAPES[op]:
        return f"an answer of kind {shape or 'unknown'!r} to a {op or 'start'} request"
    if shape == "error" and not all(k in d for k in ("etype", "error", "tb")):
        return "an error answer without its fields"
    if shape == "value":
        try:
            wire.decode(d["value"])
        except Exception:  # noqa: BLE001 - anything the codec refuses
            return "an answer whose value does not decode"
    return ""


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
