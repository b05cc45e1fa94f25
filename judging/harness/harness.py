"""The trusted test runner inside a sandbox job: `python3 -I -S harness.py < SPEC`.

Consumes the job spec on stdin (mode, tests, cases' arguments, the reference, a nonce),
never from a file, so nothing secret lies where the candidate could read it. Produces the
report: JSON lines on the report descriptor (WHET_REPORT_FD, default 3), each a `start`,
`test`, `infra`, `crash` or `end` record; without that descriptor, nonce-tagged lines on
stderr. Candidate output is forwarded to this process's stdout and stderr, capped.

The candidate runs in a worker process of its own (`worker.py`); every assertion is
evaluated here, on plain values decoded with `wire`, so patching `assert`, the test
framework or `__eq__` inside the candidate changes nothing here. Expected values of
`cases` layers never enter the sandbox at all: the returned values go into the report and
the judge compares them. Robustness inputs (fixed, generated or mutated from the tests'
own calls) run on the trusted reference in a second worker and on the candidate; both
values are reported. It does NOT score or attribute: the judge does.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import channel  # noqa: E402
import checks  # noqa: E402
import measure  # noqa: E402
import mutate  # noqa: E402
from proxy import Proxy  # noqa: E402
import wire  # noqa: E402

SHIPPED = ("harness.py", "worker.py", "channel.py", "checks.py", "measure.py", "mutate.py", "proxy.py",
           "wire.py")


class BudgetSpent(BaseException):
    """The harness's own deadline passed: stop running tests, report what is left."""


class Report:
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


class Session:
    def __init__(self, spec: dict, report: Report) -> None:
        self.spec, self.report = spec, report
        self.scratch = tempfile.mkdtemp(prefix="whet-h-")
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

    def spent(self, who: str, outcome: dict) -> None:
        key = (who, self.layer)
        self.cpu[key] = self.cpu.get(key, 0.0) + float(outcome.get("cpu_s", 0.0))

    # --- talking to workers ----------------------------------------------------------------

    def channel(self, who: str, **kw) -> channel.Channel:
        return channel.Channel(who, cwd=kw.pop("cwd", self.scratch),
                               memory_mb=self.spec["memory_mb"], report_fd=self.report.fd,
                               output_cap=self.spec["output_bytes"], printed=self.printed,
                               site=bool(self.spec.get("requires")), **kw)

    def ready(self, who: str) -> channel.Channel | dict:
        if who in self.load_failed:
            return self.load_failed[who]
        ch = self.channels.get(who)
        if ch is not None and ch.alive:
            return ch
        ch = self.channels[who] = self.channel(who)
        for request in (None, {"op": "load", "source": self.sources[who], "entry": self.spec["entry_point"],
                               "filename": f"{who if who == 'reference' else 'solution'}.py"}):
            outcome = self.outcome(who, self.ask(ch, request, self.spec["call_timeout_s"]))
            if outcome["status"] != "ok":
                outcome["detail"] = "while loading: " + outcome["detail"]
                self.load_failed[who] = outcome
                ch.close()
                return outcome
        return ch

    def call(self, who: str, args: list, cpu_s: float = 0.0, wall_s: float = 1e9) -> dict:
        ch = self.ready(who)
        if isinstance(ch, dict):
            return dict(ch)
        outcome = self.outcome(who, self.ask(ch, {"op": "call", "args": args}, cpu_s, wall_s))
        self.spent(who, outcome)
        if outcome["status"] not in ("ok", "error", "unencodable"):
            ch.close()  # it hung, exited or flooded: the next call gets a fresh worker
        if who == "candidate":
            self.hash.update(f"{outcome['status']}|{wire.dumps(outcome.get('value'))}\n".encode())
            if len(self.calls) < 400:
                self.calls.append((self.origin, args))
        return outcome

    def ask(self, ch: channel.Channel, request: dict | None, cpu_s: float = 0.0,
            wall_s: float = 1e9) -> channel.Reply:
        """One request under a CPU budget (a call's, unless given), until the harness's deadline."""
        return ch.ask(request, min(self.deadline - time.monotonic(), wall_s),
                      cpu_s or self.spec["call_cpu_s"], min(self.spec["call_timeout_s"], wall_s))

    def outcome(self, who: str, r: channel.Reply) -> dict:
        """One call's result as a plain record: status, detail, value and measurements."""
        out = {"status": r.status, "detail": r.detail, "wall_s": round(r.wall_s, 4),
               "cpu_s": round(r.cpu_s, 4), "rss_mb": round(r.rss_mb, 1)}
        if r.run_delay_s is not None:
            out["run_delay_s"] = round(r.run_delay_s, 4)
        if r.status == "timeout":
            out["limit"] = r.data.get("limit", "wall")
        if r.exit_code is not None:
            out["exit_code"] = r.exit_code
        d = r.data
        if who == "candidate" and (d.get("audit") or d.get("patched")):
            self.report.line(k="audit", events=d.get("audit", []), patched=d.get("patched", []))
        if r.status != "ok" or "hello" in d:
            if "landlock" in d:
                self.report.line(k="landlock", who=who, status=d["landlock"])
            return out
        if "exit" in d:
            out.update(status="exit", exit_code=d["exit"], detail=f"SystemExit({d['exit']})")
            if d.get("finished"):
                out.update(finished=True, detail="ran to its end")
        elif "unencodable" in d:
            out.update(status="unencodable", detail=f"returned {d['unencodable']}",
                       eq_override=bool(d.get("eq_override")))
        elif d.get("ok") is False:
            out.update(status="error", etype=str(d.get("etype")), detail=str(d.get("tb") or d.get("error")))
        elif "value" in d:
            out["value"] = d["value"]
        return out

    def close(self) -> None:
        for ch in self.channels.values():
            ch.close()
        shutil.rmtree(self.scratch, ignore_errors=True)  # a plain backend's /tmp is shared

    # --- layers --------------------------------------------------------------------------

    def test(self, test_id: str, layer: str, outcome: dict) -> None:
        self.hash.update(f"{test_id}|{outcome['status']}\n".encode())
        self.report.line(k="test", id=test_id, layer=layer, **outcome)

    def run_cases(self, layer: str, cases: list) -> None:
        for i, args in enumerate(cases):
            self.origin = f"{layer}/{i}"
            self.test(f"{layer}/{i}", layer, self.call("candidate", args))

    def run_layers(self) -> None:
        for layer in self.spec["layers"]:
            name = self.layer = layer["name"]
            if "check" in layer:
                # A visible test the reference itself fails is a broken example (HumanEval
                # has some): it is reported as invalid, not held against the candidate.
                invalid = set()
                if name == "visible" and self.sources["reference"]:
                    invalid = self.run_check(name, layer["check"], "reference")
                    if "reference" in self.load_failed:
                        invalid = set()
                self.run_check(name, layer["check"], "candidate", invalid)
            elif "cases" in layer:
                self.run_cases(name, layer["cases"])
            elif "runs" in layer:
                self.run_scripts(name, layer["runs"])
        if "robustness" in self.spec:
            self.layer = "robustness"
            self.robustness(self.spec["robustness"])

    def reference_runtime(self, allowance_s: float) -> dict:
        """CPU seconds of the reference on the hidden tests, beside the candidate's (measured
        as they ran), with a deadline of its own so the tests' budget is untouched."""
        hidden = next((layer for layer in self.spec["layers"] if layer["name"] == "hidden"), None)
        if hidden is None or not self.sources["reference"]:
            return {"error": "no hidden tests or no reference"}
        self.deadline = time.monotonic() + allowance_s
        signal.setitimer(signal.ITIMER_REAL, allowance_s + 0.25)
        self.layer = "hidden:reference"
        if "check" in hidden:
            failed = self.run_check("hidden", hidden["check"], "reference")
            ok = not failed and "reference" not in self.load_failed
        elif "cases" in hidden:
            ok = all(self.call("reference", args)["status"] == "ok" for args in hidden["cases"])
        else:
            ok = all(o["status"] == "ok" for o in self.run_scripts("", hidden["runs"], "reference"))
        if not ok:
            return {"error": "the reference fails a hidden test"}
        return {"candidate_cpu_s": round(self.cpu.get(("candidate", "hidden"), 0.0), 6),
                "reference_cpu_s": round(self.cpu.get(("reference", "hidden:reference"), 0.0), 6)}

    def run_check(self, layer: str, source: str, who: str, invalid: set[int] = frozenset()) -> set[int]:
        """Run `check` against `who`, one step at a time; return the failing test indexes."""
        plan = checks.plan_check(source)
        proxy = Proxy(self, who)
        ns = {"__name__": "__check__", "__builtins__": builtins}
        random.seed(0)  # tests that draw random inputs draw the same ones every run
        _exec_trusted(self.spec.get("prefix", ""), ns)
        exec(compile(plan.module, "<tests>", "exec"), ns)
        ns[plan.param] = proxy
        if self.spec["entry_point"]:
            ns[self.spec["entry_point"]] = proxy  # tests may call it by name (HumanEval/33)
        failing, index = set(), 0
        for src, is_test in plan.steps:
            self.origin = f"{layer}/{index}"
            outcome = proxy.step(src, ns)
            if not is_test:
                continue
            if outcome["status"] != "ok":
                failing.add(index)
            if who == "candidate":
                if index in invalid:
                    outcome = {"status": "invalid", "detail": "the reference fails this visible test"}
                outcome["source"] = src[:300]
                self.test(f"{layer}/{index}", layer, outcome)
            index += 1
        return failing

    def run_scripts(self, layer: str, cases: list, who: str = "candidate") -> list[dict]:
        outcomes = []
        for i, case in enumerate(cases):
            outcome = self.script(who, case)
            if layer:
                self.test(f"{layer}/{i}", layer, outcome)
            outcomes.append(outcome)
        return outcomes

    def script(self, who: str, case: dict, cpu_s: float = 0.0, wall_s: float = 1e9) -> dict:
        cwd = tempfile.mkdtemp(prefix="case-", dir=self.scratch)
        for name, text in case.get("files", {}).items():
            path = os.path.join(cwd, name)
            if os.path.dirname(os.path.abspath(path)).startswith(cwd):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
        stdin_path = os.path.join(self.scratch, f"stdin-{os.path.basename(cwd)}")
        with open(stdin_path, "w") as f:
            f.write(case.get("stdin", ""))
        ch = self.channel(who, cwd=cwd, capture=True, stdin_path=stdin_path)
        outcome = self.outcome(who, self.ask(ch, None, self.spec["call_timeout_s"]))
        if outcome["status"] == "ok":
            outcome = self.outcome(who, self.ask(ch, {"op": "script", "source": self.sources[who]}, cpu_s, wall_s))
            self.spent(who, outcome)
        out, err, truncated = ch.output()
        ch.close()
        if outcome["status"] == "exit":
            outcome["status"] = "ok"  # a script may end with sys.exit(); its output is judged
            if not outcome.pop("finished", False):
                outcome["exited_early"] = True  # sys.exit or os._exit before the script's end
        outcome.update(stdout=out, stderr_tail=err[-1000:], truncated=truncated)
        if who == "candidate":
            self.hash.update(f"{outcome['status']}|{out}\n".encode())
        return outcome

    def robustness(self, spec: dict) -> None:
        mode = self.spec["mode"]
        fixed = spec.get("cases", [])
        if mode == "script":
            self.run_scripts("robustness", fixed)
        else:
            self.run_cases("robustness", fixed)
        visible = next((layer.get("runs", []) for layer in self.spec["layers"] if layer["name"] == "visible"), [])
        calls = [(f"visible/{i}", run) for i, run in enumerate(visible)] if mode == "script" else self.calls
        quick = max(self.spec["call_cpu_s"] / 4, 0.05)

        known: dict[str, dict] = {}

        def answer(args: list) -> list | None:  # the reference's value, to pick near inputs by
            ref = known[wire.dumps(args)] = self.call("reference", args, quick, quick * 8)
            return [ref["value"]] if ref["status"] == "ok" and "value" in ref else None

        answer = answer if self.sources["reference"] else None
        made = mutate.inputs(spec, calls, script=mode == "script", answer=answer)
        for j, (given, origin, base) in enumerate(made):
            test_id = f"robustness/{len(fixed) + j}"
            # derived from that visible test's input, whose reference answer was `base`
            near = ({"origin": origin} if origin else {}) | ({} if base is mutate.NO_ANSWER else {"base": base})
            if given is None or not self.sources["reference"]:
                self.test(test_id, "robustness", {"status": "invalid", "detail": "no input or no reference", **near})
                continue
            run = self.script if mode == "script" else self.call
            # The reference gets a short leash: a mutated input outside its preconditions
            # (a base of 1, say) can make it loop, and that input is simply dropped.
            ref = known.pop(wire.dumps(given), None) if mode != "script" else None
            ref = ref or run("reference", given, quick, quick * 8)  # a near input's was run already
            if ref["status"] == "timeout" and self.deadline - time.monotonic() <= 0.01:
                raise BudgetSpent()  # the budget ran out: what is left is not run, not invalid
            if ref["status"] != "ok":
                self.test(test_id, "robustness", {"status": "invalid", "detail": "reference: " + ref["detail"][:200],
                                                  **near})
                continue
            outcome = run("candidate", given)
            outcome.update(near)
            outcome["reference"] = ref.get("value", ref.get("stdout"))
            outcome["input"] = given
            self.test(test_id, "robustness", outcome)


def _exec_trusted(source: str, ns: dict) -> None:
    try:
        exec(compile(source, "<prefix>", "exec"), ns)
    except Exception:  # noqa: BLE001 - a prompt that does not run alone defines less
        pass


def _read(name: str) -> str:
    with open(os.path.join(os.getcwd(), name), encoding="utf-8", errors="replace") as f:
        return f.read()


def _shipped_digest() -> dict:
    out = {}
    for name in SHIPPED:
        with open(os.path.join(HERE, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def run(spec: dict, report: Report) -> None:
    report.line(k="start", nonce=spec["nonce"], python=sys.version.split()[0])
    for module in spec.get("requires", []):
        try:
            __import__(module)
        except ImportError as exc:
            report.line(k="infra", what="missing_dependency", detail=f"{module}: {exc}")
            return
    quality = spec.get("quality") or {}
    if quality.get("lint") or quality.get("types"):
        # Before any candidate code runs, so nothing it does can reach the tools.
        report.line(k="quality", **measure.measure(os.path.join(os.getcwd(), spec["solution"]), quality))
    session = Session(spec, report)
    signal.signal(signal.SIGALRM, _spent)
    # A backstop for trusted code that loops: calls end on their own at the budget, first.
    signal.setitimer(signal.ITIMER_REAL, max(spec["budget_s"], 0.01) + 0.25)
    try:
        try:
            session.run_layers()
        except BudgetSpent:
            report.line(k="budget", detail=f"harness budget of {spec['budget_s']} s spent")
        try:
            if quality.get("runtime"):
                report.line(k="quality", runtime=session.reference_runtime(float(quality.get("wall_s", 8.0))))
        except BudgetSpent:
            report.line(k="quality", runtime={"error": "the reference ran past the allowance"})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        session.close()
    report.line(k="end", nonce=spec["nonce"], digest=session.hash.hexdigest()[:32],
                shipped=_shipped_digest())


def _spent(signum, frame) -> None:
    raise BudgetSpent()


def main() -> int:
    spec = json.loads(sys.stdin.buffer.read())
    report = Report(spec["nonce"])
    try:
        run(spec, report)
    except BaseException:  # noqa: BLE001 - the judge must learn that the harness failed
        report.line(k="crash", error=traceback.format_exc()[-3000:])
        return 70
    return 0


if __name__ == "__main__":
    sys.exit(main())
