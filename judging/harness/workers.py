"""The harness's side of its workers: the report descriptor, and starting, asking, measuring,
reclaiming and closing the candidate's and the reference's worker processes.

Consumes the job spec and `channel.Channel`s; produces outcome records (plain dicts) for the
harness's layers. Candidate workers live in a user and PID namespace of their own; a
reference that fails for a reason outside its code gets everything the candidate holds
reclaimed and one retry, then is the judge's fault (`JudgeFault`). It runs no tests.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time

import channel
import wire

HERE = os.path.dirname(os.path.abspath(__file__))

class BudgetSpent(BaseException):
    """The harness's own deadline passed: stop running tests, report what is left."""


class JudgeFault(BaseException):
    """The reference or a worker could not be started even after a reclaim (reported)."""


NS_FAILED = 75
"worker.py's exit code when it had to isolate and could not."
PIDS_MARGIN = 12
"Processes the candidate's RLIMIT_NPROC leaves to the harness and the reference."


class Report:
    """The report: JSON lines on the report descriptor (WHET_REPORT_FD, default 3), each a
    `start`, `test`, `infra`, `crash` or `end` record; without that descriptor, nonce-tagged
    lines on stderr."""

    def __init__(self, nonce: str) -> None:
        self.nonce = nonce
        fd = int(os.environ.get("WHET_REPORT_FD", "3"))
        try:
            os.fstat(fd)
            self.fd, self.prefix = fd, b""
        except OSError:
            self.fd, self.prefix = 2, f"\x1ewhet-report:{nonce} ".encode()

    def line(self, **record) -> None:
        data = self.prefix + json.dumps(record).encode() + b"\n"
        # The budget alarm must not cut a record in half.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        try:
            channel._write_all(self.fd, data)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


class Workers:
    """One job's workers and scratch folders. Expected values of `cases` layers never enter the
    sandbox at all: the returned values go into the report and the judge compares them.
    Robustness inputs (fixed, generated or mutated from the tests' own calls) run on the trusted
    reference in a second worker and on the candidate; both values are reported. Candidate
    workers live in a user and PID namespace of their own (`isolation` record) with a scratch
    directory of their own; a reference that fails for a reason outside its code gets
    everything the candidate holds reclaimed and one retry, then is the judge's fault (`infra`
    reference)."""

    def __init__(self, spec: dict, report: Report) -> None:
        self.spec, self.report = spec, report
        self.scratch = tempfile.mkdtemp(prefix="whet-h-")
        self.dirs = {who: os.path.join(self.scratch, who) for who in ("candidate", "reference", "io")}
        for d in self.dirs.values():
            os.mkdir(d, 0o700)
        self.channels: dict[str, channel.Channel] = {}
        self.load_failed: dict[str, dict] = {}
        self.sources = {"candidate": _read(spec["solution"]), "reference": spec.get("reference", "")}
        self.hash = hashlib.sha256()
        self.calls: list[tuple[str, list]] = []
        "(test id, encoded arguments) of the candidate's calls, the first 400."
        self.origin = ""
        "The test id running now: the origin of the calls it makes."
        self.printed = [0]
        "Candidate output forwarded so far, across every worker (one cap for the job)."
        self.deadline = time.monotonic() + spec["budget_s"]
        self.layer = ""
        self.cpu: dict[tuple[str, str], float] = {}
        "CPU seconds of the calls and scripts each side ran, by (who, layer)."
        self.isolation = ""
        "How the first candidate worker ran ('pidns' or 'shared: why'); later ones must match."
        pids = spec.get("pids")
        self.nproc = max(int(pids) - PIDS_MARGIN, 4) if isinstance(pids, int) and pids > 0 else 0
        self.live: list[channel.Channel] = []
        "Every candidate worker not yet closed (script mode has one per run)."

    def spent(self, who: str, outcome: dict) -> None:
        key = (who, self.layer)
        self.cpu[key] = self.cpu.get(key, 0.0) + float(outcome.get("cpu_s", 0.0))

    # --- talking to workers ----------------------------------------------------------------

    def channel(self, who: str, **kw) -> channel.Channel:
        """A started worker for `who` (OSError when none can be). The reference's output is
        captured, never forwarded or counted against the candidate's cap."""
        if who == "candidate":
            ns = "-" if self.isolation.startswith("shared") else f"{self.nproc}" + ("!" if self.isolation else "")
            kw.setdefault("ns", ns)
        else:
            kw.setdefault("capture", True)
        ch = channel.Channel(who, cwd=kw.pop("cwd", self.dirs[who]),
                             memory_mb=self.spec["memory_mb"], report_fd=self.report.fd,
                             output_cap=self.spec["output_bytes"], printed=self.printed if who == "candidate" else [0],
                             site=bool(self.spec.get("requires")), **kw)
        if who == "candidate":
            self.live = [c for c in self.live if c.alive] + [ch]
        return ch

    def start(self, who: str, **kw) -> tuple[channel.Channel | None, dict]:
        """A worker that said hello, and the hello's outcome; for the candidate, one that
        cannot start gets everything the candidate holds reclaimed and one more try, then
        is the judge's fault (`infra` spawn)."""
        for attempt in (0, 1):
            try:
                ch = self.channel(who, **kw)
            except OSError as exc:
                ch, outcome = None, {"status": "spawn", "detail": f"could not start a worker: {exc}"}
            else:
                outcome = self.outcome(who, self.ask(ch, None, self.spec["call_timeout_s"]))
                if who == "candidate" and outcome.get("exit_code") == NS_FAILED:
                    outcome = {"status": "spawn", "detail": "no namespace for the candidate"}
                if outcome["status"] != "ok":
                    ch.close()
                    ch = None
            if who != "candidate" or outcome["status"] != "spawn":
                break
            if attempt:
                self.report.line(k="infra", what="spawn", detail=outcome["detail"][:500])
                raise JudgeFault()
            self.reclaim()
        if ch is not None and who == "candidate" and not self.isolation:
            self.isolation = ch.isolation or "shared: the worker did not say"
            self.report.line(k="isolation", candidate=self.isolation)
        return ch, outcome

    def ready(self, who: str) -> channel.Channel | dict:
        if who in self.load_failed:
            return self.load_failed[who]
        ch = self.channels.get(who)
        if ch is not None and ch.alive:
            return ch
        ch, outcome = self.start(who)
        if ch is not None:
            self.channels[who] = ch
            outcome = self.outcome(who, self.ask(ch, {"op": "load", "source": self.sources[who],
                                                      "entry": self.spec["entry_point"],
                                                      "filename": f"{who if who == 'reference' else 'solution'}.py"},
                                                 self.spec["call_timeout_s"]))
            if outcome["status"] == "ok":
                return ch
        outcome["detail"] = "while loading: " + outcome["detail"]
        if who == "reference":
            outcome.update(lost=True, not_started=True)
        self.load_failed[who] = outcome
        if ch is not None:
            ch.close()
        return outcome

    def call(self, who: str, args: list, cpu_s: float = 0.0, wall_s: float = 1e9) -> dict:
        if who == "reference":
            return self.trusted(self._call, args, cpu_s, wall_s)
        return self._call(who, args, cpu_s, wall_s)

    def _call(self, who: str, args: list, cpu_s: float = 0.0, wall_s: float = 1e9) -> dict:
        ch = self.ready(who)
        if isinstance(ch, dict):
            return dict(ch)
        outcome = self.outcome(who, self.ask(ch, {"op": "call", "args": args}, cpu_s, wall_s))
        self.spent(who, outcome)
        if outcome["status"] not in ("ok", "error", "unencodable") or outcome.get("forged"):
            ch.close()  # it hung, exited, flooded or forged: the next call gets a fresh worker
        if who == "candidate":
            self.hash.update(f"{outcome['status']}|{wire.dumps(outcome.get('value'))}\n".encode())
            if len(self.calls) < 400:
                self.calls.append((self.origin, args))
        return outcome

    def trusted(self, run, *args) -> dict:
        """Run the reference; when it fails for a reason outside its own code on this input
        (it could not start or load, was killed, ended, or waited past the wall clock with
        its CPU unspent), reclaim everything the candidate holds and try once more. One that
        still cannot start or load is the judge's fault; one that runs and fails keeps that."""
        outcome = run("reference", *args)
        if outcome.pop("lost", False) and self.deadline - time.monotonic() > 0.01:
            self.reclaim()
            outcome = run("reference", *args)
            outcome.pop("lost", False)
            if outcome.get("not_started"):
                self.report.line(k="infra", what="reference", detail=outcome["detail"][:500])
                raise JudgeFault()
        outcome.pop("not_started", None)
        return outcome

    def reclaim(self) -> None:
        """Kill every worker (the candidate's with all it forked) and wipe the candidate's scratch."""
        for ch in [*self.channels.values(), *self.live]:
            ch.close()
        self.channels.clear()
        self.live.clear()
        self.load_failed.pop("reference", None)
        shutil.rmtree(self.dirs["candidate"], ignore_errors=True)
        os.makedirs(self.dirs["candidate"], 0o700, exist_ok=True)

    def ask(self, ch: channel.Channel, request: dict | None, cpu_s: float = 0.0,
            wall_s: float = 1e9) -> channel.Reply:
        """One request under a CPU budget (a call's, unless given), until the harness's deadline."""
        return ch.ask(request, min(self.deadline - time.monotonic(), wall_s),
                      cpu_s or self.spec["call_cpu_s"], min(self.spec["call_timeout_s"], wall_s))

    def outcome(self, who: str, r: channel.Reply) -> dict:
        """One call's result as a plain record: status, detail, value and measurements.
        The reference's records say `lost` when the failure was not its code's."""
        out = {"status": r.status, "detail": r.detail, "wall_s": round(r.wall_s, 4),
               "cpu_s": round(r.cpu_s, 4), "rss_mb": round(r.rss_mb, 1)}
        if r.run_delay_s is not None:
            out["run_delay_s"] = round(r.run_delay_s, 4)
        if r.status == "timeout":
            out["limit"] = r.data.get("limit", "wall")
        if r.exit_code is not None:
            out["exit_code"] = r.exit_code
        if r.status == "forged":
            out.update(status="error", etype="BadAnswer", forged=r.forged)
        if who == "reference" and r.status != "ok" and not (r.status == "timeout" and out["limit"] == "cpu"):
            out["lost"] = True
        d = r.data
        if who == "candidate" and (d.get("audit") or d.get("patched")):
            self.report.line(k="audit", events=[e[:500] for e in d.get("audit", [])], patched=d.get("patched", []))
        if r.status != "ok" or "hello" in d:
            if "landlock" in d:
                self.report.line(k="landlock", who=who, status=d["landlock"][:200])
            return out
        if "exit" in d:
            out.update(status="exit", exit_code=d["exit"], detail=f"SystemExit({d['exit']})")
            if d.get("finished"):
                out.update(finished=True, detail="ran to its end")
        elif "unencodable" in d:
            out.update(status="unencodable", detail=f"returned {d['unencodable'][:500]}",
                       eq_override=bool(d.get("eq_override")))
        elif d.get("ok") is False:
            out.update(status="error", etype=d["etype"][:100], detail=d["tb"] or d["error"])
            if who == "candidate" and out["etype"] in ("ModuleNotFoundError", "ImportError"):
                out["module_available"] = self.module_available(d.get("module") or _module_named(d["error"]))
        elif "value" in d:
            out["value"] = d["value"]
        return out

    def module_available(self, name: str) -> bool:
        """Whether the runtime has top-level module `name` where the candidate's worker looks
        (checked here, with find_spec, never importing it)."""
        top = name.split(".")[0]
        if not top.isidentifier():
            return False
        if top in sys.builtin_module_names or importlib.machinery.FrozenImporter.find_spec(top):
            return True
        paths = [p for p in sys.path if p and os.path.abspath(p) != HERE]
        if self.spec.get("requires"):
            import site

            paths += site.getsitepackages()
        return importlib.machinery.PathFinder.find_spec(top, paths) is not None

    def close(self) -> None:
        for ch in self.live:
            extra = ch.settle(min(self.spec["call_timeout_s"], 1.0)) if ch.alive else ""
            if extra:  # a line the program wrote after the last answer the harness read
                self.report.line(k="audit", events=[f"report_fd: forged answer line: {extra}"], patched=[])
        for ch in [*self.channels.values(), *self.live]:
            ch.close()
        shutil.rmtree(self.scratch, ignore_errors=True)  # a plain backend's /tmp is shared


def _module_named(error: str) -> str:
    found = re.search(r"No module named '([^']+)'", error)
    return found.group(1) if found else ""


def _read(name: str) -> str:
    with open(os.path.join(os.getcwd(), name), encoding="utf-8", errors="replace") as f:
        return f.read()
