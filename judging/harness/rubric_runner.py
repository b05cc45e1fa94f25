"""The trusted runner of a verifiers rubric inside a sandbox job: `python3 -I rubric_runner.py < SPEC`.

Consumes the spec on stdin (nonce, the task's module and classes, its data as JSON, the
reply, a time budget); the job folder holds `shim/` (verifiers.v1 and pydantic stand-ins,
`vf_shim.py`) and `env/` (the environment's own source files). Produces the report on the
report descriptor (WHET_REPORT_FD, default 3; nonce-tagged stderr lines without it): a
`start` record, an `audit` record of built-ins the scoring replaced, one `reward` record per
recorded reward (name, score, weight), an `infra` record when the rubric raised, timed out
or ended without scores, and an `end` record with the count and digest of its rewards.

The scoring runs in a forked child that has the report descriptor closed: a reward method
that executes the reply (or the reply, once executed) can end or hang that child, never
write the report; the child's scores come back over a pipe and the parent reports them.
It does NOT judge the scores (range, NaN, pass): the judge does, outside the sandbox.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


class Report:
    """The rubric job's report channel (WHET_REPORT_FD; else nonce-tagged lines on stderr)."""

    def __init__(self, nonce: str) -> None:
        fd = int(os.environ.get("WHET_REPORT_FD", "3"))
        try:
            os.fstat(fd)
            self.fd, self.prefix = fd, b""
        except OSError:
            self.fd, self.prefix = 2, f"\x1ewhet-report:{nonce} ".encode()

    def line(self, **record) -> None:
        data = self.prefix + json.dumps(record).encode() + b"\n"
        while data:
            data = data[os.write(self.fd, data):]


def resolve(module, qualname: str):
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


_WATCHED = (("builtins", ("print", "isinstance", "float", "int", "min", "max", "sum", "len", "round",
                          "AssertionError", "__import__", "open", "exec", "eval")),
            ("sys", ("exit",)), ("os", ("_exit", "kill")), ("math", ("isclose", "isnan")))
"Names a reply run by a reward method has no honest reason to replace."


def _watched() -> dict:
    out = {}
    for mod, names in _WATCHED:
        module = sys.modules.get(mod) or __import__(mod)
        for name in names:
            out[f"{mod}.{name}"] = id(getattr(module, name, None))
    return out


def score(spec: dict) -> dict:
    """In the child: import the environment through the shim and run its Task.score; what
    of `_WATCHED` the scoring replaced comes back as `patched`."""
    import asyncio
    import importlib
    import math  # noqa: F401 - watched

    sys.path[:0] = [os.path.join(HERE, "shim"), os.path.join(HERE, "env")]
    module = importlib.import_module(spec["module"])
    data = resolve(module, spec["data_class"])(**spec["data"])
    task = resolve(module, spec["task_class"])(data)
    vf = importlib.import_module("verifiers.v1")
    trace = vf.Trace(data, spec["reply"], spec.get("finish_reason", ""))
    before = _watched()
    asyncio.run(task.score(trace))
    after = _watched()
    return {"rewards": [[name, None if r is None else r.score, None if r is None else r.weight]
                        for name, r in trace.rewards.items()],
            "patched": sorted(k for k in before if after.get(k) != before[k])}


def child(spec: dict, report_fd: int, write_fd: int) -> None:
    os.close(report_fd)
    try:
        payload = score(spec)
    except BaseException:  # noqa: BLE001 - the parent reports what the rubric raised
        payload = {"error": traceback.format_exc()[-3000:]}
    data = json.dumps(payload).encode()
    while data:
        data = data[os.write(write_fd, data):]
    os._exit(0)


def collect(read_fd: int, pid: int, budget_s: float) -> tuple[bytes, str]:
    """The child's payload, and what went wrong ('' when it finished in time)."""
    deadline, chunks = time.monotonic() + budget_s, []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([read_fd], [], [], left)[0]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return b"", f"the rubric did not finish within {budget_s} s"
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        return b"", f"the scoring process ended without scores ({_status(status)})"
    return b"".join(chunks), ""


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit code {os.WEXITSTATUS(status)}"


def main() -> int:
    spec = json.loads(sys.stdin.buffer.read())
    report = Report(spec["nonce"])
    report.line(k="start", nonce=spec["nonce"], python=sys.version.split()[0])
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        child(spec, report.fd, write_fd)
    os.close(write_fd)
    raw, problem = collect(read_fd, pid, float(spec["budget_s"]))
    written: list[str] = []
    if problem:
        report.line(k="infra", what="rubric_timeout" if "within" in problem else "rubric_error",
                    detail=problem)
    else:
        try:
            payload = json.loads(raw)
            payload = payload if isinstance(payload, dict) else {"error": "not a JSON object"}
        except ValueError as exc:
            payload = {"error": f"the scoring process sent no scores: {exc}"}
        if "error" in payload:
            report.line(k="infra", what="rubric_error", detail=payload["error"])
        if payload.get("patched"):
            report.line(k="audit", events=[], patched=[str(p) for p in payload["patched"]][:20])
        for name, value, weight in payload.get("rewards", []):
            record = {"k": "reward", "name": str(name), "score": value, "weight": weight}
            written.append(json.dumps(record, sort_keys=True))
            report.line(**record)
    # What this runner wrote, so a reward record written by anyone else shows.
    report.line(k="end", nonce=spec["nonce"], rewards=len(written),
                rewards_digest=hashlib.sha256("\n".join(written).encode()).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main())
