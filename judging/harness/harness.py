"""The trusted test runner inside a sandbox job: `python3 -I -S harness.py < SPEC`.

Consumes the job spec on stdin (mode, tests, cases' arguments, the reference, a nonce),
never from a file, so nothing secret lies where the candidate could read it. Produces the
report (`Report`). The candidate runs in a worker process of its own (`worker.py`); every
assertion is evaluated here, on plain values decoded with `wire`, so patching `assert`, the
test framework or `__eq__` inside the candidate changes nothing here (`Session`). Candidate
output is forwarded to this process's stdout and stderr, capped.
It does NOT score or attribute: the judge does.
"""

from __future__ import annotations

import builtins
import ctypes
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
import checks  # noqa: E402
import measure  # noqa: E402
import mutate  # noqa: E402
from proxy import Proxy  # noqa: E402
import wire  # noqa: E402
from workers import BudgetSpent, JudgeFault, Report, Workers, _read  # noqa: E402

SHIPPED = ("harness.py", "worker.py", "channel.py", "checks.py", "measure.py", "mutate.py", "proxy.py",
           "wire.py", "workers.py")


class Session(Workers):
    """One job's tests, layer by layer, over its workers (`workers.Workers`). Expected values of
    `cases` layers never enter the sandbox at all: the returned values go into the report and
    the judge compares them. Robustness inputs (fixed, generated or mutated from the tests'
    own calls) run on the trusted reference and on the candidate; both values are reported."""

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
        if who == "reference":
            return self.trusted(self._script, case, cpu_s, wall_s)
        try:
            return self._script(who, case, cpu_s, wall_s)
        except OSError:  # no room for its case: what the candidate left is reclaimed first
            self.reclaim()
            try:
                return self._script(who, case, cpu_s, wall_s)
            except OSError as exc:
                self.report.line(k="infra", what="spawn", detail=f"cannot lay out a case: {exc}"[:500])
                raise JudgeFault() from None

    def _script(self, who: str, case: dict, cpu_s: float = 0.0, wall_s: float = 1e9) -> dict:
        """One run of `who` as a script in a case directory of its own, removed after it."""
        try:
            cwd = tempfile.mkdtemp(prefix="case-", dir=self.dirs[who])
            stdin_path = os.path.join(self.dirs["io"], f"stdin-{who}-{os.path.basename(cwd)}")
            _lay_out(cwd, case, stdin_path)
        except OSError as exc:
            if who != "reference":
                raise
            return {"status": "spawn", "detail": f"cannot lay out a case: {exc}", "lost": True, "not_started": True}
        try:
            ch, outcome = self.start(who, cwd=cwd, capture=True, stdin_path=stdin_path)
            out, err, truncated = "", "", False
            if ch is None and who == "reference":
                outcome.update(lost=True, not_started=True)
            elif ch is not None:
                outcome = self.outcome(who, self.ask(ch, {"op": "script", "source": self.sources[who]}, cpu_s, wall_s))
                self.spent(who, outcome)
                out, err, truncated = ch.output()
                extra = ch.settle(min(self.spec["call_timeout_s"], 1.0)) if who == "candidate" and ch.alive else ""
                if extra and not outcome.get("forged"):
                    outcome.update(status="error", etype="BadAnswer", forged=extra)
                ch.close()
        finally:
            shutil.rmtree(cwd, ignore_errors=True)
            try:
                os.unlink(stdin_path)
            except OSError:
                pass
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


def _lay_out(cwd: str, case: dict, stdin_path: str) -> None:
    for name, text in case.get("files", {}).items():
        path = os.path.join(cwd, name)
        if os.path.dirname(os.path.abspath(path)).startswith(cwd):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
    with open(stdin_path, "w") as f:
        f.write(case.get("stdin", ""))


def _exec_trusted(source: str, ns: dict) -> None:
    try:
        exec(compile(source, "<prefix>", "exec"), ns)
    except Exception:  # noqa: BLE001 - a prompt that does not run alone defines less
        pass


def _shipped_digest() -> dict:
    out = {}
    for name in SHIPPED:
        with open(os.path.join(HERE, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def run(spec: dict, report: Report) -> None:
    """Run the spec's tests and write their records to `report`, `start` first."""
    report.line(k="start", nonce=spec["nonce"], python=sys.version.split()[0])
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no /proc/<pid>/mem for same-uid peers
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
    except JudgeFault:
        pass  # its infra record is written; the tests left are not run
    except Exception:  # noqa: BLE001 - a harness fault is reported, and the report still ends
        report.line(k="crash", error=traceback.format_exc()[-3000:])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        session.close()
    report.line(k="end", nonce=spec["nonce"], digest=session.hash.hexdigest()[:32],
                shipped=_shipped_digest())


def _spent(signum, frame) -> None:
    raise BudgetSpent()


def main() -> int:
    """Read the spec from stdin and run it; a failure of the harness itself becomes a `crash`
    record (exit 70), so the judge learns of it."""
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
