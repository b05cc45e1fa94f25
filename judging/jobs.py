"""Build the sandbox `Job` that checks a candidate at a task, for each executed verifier kind.

Consumes a `Task` and a `Candidate`; produces a `Job`: the trusted harness scripts (package
data of `judging.harness`) and `solution.py` as files, `python3 -I -S harness.py` as the
command, and the spec on stdin (`make_spec`). Expected values of cases (python_io,
script_io) are never put in the job: the judge compares outside. `expected_ids` recomputes
from a job which test ids its report must hold, so a report that stops early is caught. It
runs nothing; what each kind gets is its `judging.kinds` record's `job`: the harness (in
its `mode`), the rubric runner (`judging.rubric`), or no job at all.
"""

from __future__ import annotations

import functools
import hashlib
import json
import secrets
from importlib import resources

import msgspec

from bus.messages import Job, Task
from judging import kinds, rubric
from judging import quality as quality_mod
from judging.config import QualityConfig
from judging.extract import Candidate
from judging.harness import checks, wire

COMMAND = ["python3", "-I", "-S", "harness.py"]
"The runtime's own Python, isolated from the environment and without site-packages."
SHIPPED = ("harness.py", "worker.py", "channel.py", "checks.py", "measure.py", "mutate.py", "proxy.py",
           "wire.py", "workers.py")
DEFAULT_RANDOM = 10
NEAR_SCRIPTS = 2
"Robustness inputs of a script task with a reference and no generator: near its visible cases."


class TaskError(ValueError):
    """The task's verifier data is malformed (names the field)."""


@functools.cache
def shipped() -> dict[str, bytes]:
    """The harness scripts, as they go into every job."""
    root = resources.files("judging.harness")
    return {name: root.joinpath(name).read_bytes() for name in SHIPPED}


@functools.cache
def shipped_digest() -> dict[str, str]:
    """The sha256 of each shipped harness script, by name."""
    return {name: hashlib.sha256(data).hexdigest() for name, data in shipped().items()}


def build_job(task: Task, cand: Candidate, *, nonce: str | None = None,
              quality: QualityConfig | None = None) -> Job:
    """The job that runs every test layer of `task` against `cand`, and measures its quality
    when `quality` is on (its time, CPU and memory limits then grow by the measurements' own
    allowance; the harness's budgets and the candidate's memory cap stay the task's)."""
    kind = kinds.of(task)
    if kind.job == "rubric":
        try:
            return rubric.build_job(task, cand.code, nonce or secrets.token_hex(16))
        except rubric.RubricTaskError as exc:
            raise TaskError(str(exc)) from None
    if kind.job != "harness":
        executed = sorted(k.name for k in kinds.KINDS.values() if k.job != "none")
        raise TaskError(f"verifier.kind: {task.verifier.kind!r} is not executed (expected one of "
                        f"{executed})")
    spec = make_spec(task, nonce or secrets.token_hex(16))
    limits = task.limits
    # A workspace bundle is not one module: quality is measured on single-file attempts only.
    measured = quality_mod.job_spec(quality, cand) if quality is not None and kind.measured else None
    if measured is not None:
        spec["quality"] = measured
        tools = measured["lint"] or measured["types"]
        limits = msgspec.structs.replace(limits, timeout_s=limits.timeout_s + quality.time_s,
                                         cpu_s=limits.cpu_s + quality.time_s,
                                         memory_mb=limits.memory_mb + quality_mod.MEMORY_MB * tools)
    files = {**shipped(), "solution.py": cand.code.encode()}
    return Job(command=list(COMMAND), files=files, runtime=task.runtime,
               stdin=json.dumps(spec).encode(), limits=limits,
               expected_tests=sum(len(ids) for ids in expected_ids(spec).values()))


def make_spec(task: Task, nonce: str) -> dict:
    """The harness spec of `task`: tests, the arguments of each case, the reference, a nonce.

    Verifier extras read here (besides those the kinds define): `random_cases` (how many
    randomized inputs, default 10 for functions, 2 near the visible cases for scripts without
    `generator`, 0 without a reference), `generator` (source defining `generate(rng)`: an
    argument list, or a script case) and `requires` (comma-separated modules the runtime must
    provide)."""
    v = task.verifier
    kind = kinds.of(task)
    mode = kind.mode
    limits = task.limits
    spec = {"v": 1, "nonce": nonce, "mode": mode, "entry_point": task.entry_point,
            "solution": "solution.py", "budget_s": round(max(limits.timeout_s * 0.75 - 0.3, 0.2), 3),
            "call_timeout_s": round(max(limits.timeout_s * 0.25, 0.2), 3),
            "call_cpu_s": round(max(min(limits.cpu_s, limits.timeout_s) * 0.1, 0.1), 3),
            "memory_mb": limits.memory_mb, "pids": limits.pids, "output_bytes": max(limits.output_bytes // 4, 1024),
            "requires": [m.strip() for m in v.extra.get("requires", "").split(",") if m.strip()]}
    if mode == "check":
        spec["prefix"] = v.extra.get("prefix", "")
        spec["layers"] = [{"name": n, "check": src} for n, src in (("visible", v.visible), ("hidden", v.hidden)) if src.strip()]
        spec["reference"] = (_with_newline(spec["prefix"]) + v.reference) if v.reference else ""
        fixed = [_args(c, "robustness") for c in _cases(v.extra.get("robustness", ""), "extra.robustness")]
        spec["robustness"] = {"inputs": fixed, **_random(task, default=DEFAULT_RANDOM)}
    elif mode == "function":
        spec["layers"] = [{"name": n, "cases": [_args(c, n) for c in _cases(src, n)]}
                          for n, src in (("visible", v.visible), ("hidden", v.hidden))]
        spec["reference"] = _repo_reference(v.reference) if kind.attempt == "workspace" else v.reference
        cases = [_args(c, "robustness") for c in _cases(v.extra.get("robustness", ""), "extra.robustness")]
        spec["robustness"] = {"cases": cases, **_random(task, default=DEFAULT_RANDOM if v.reference else 0)}
    else:
        spec["layers"] = [{"name": n, "runs": [_run(c, n) for c in _cases(src, n)]}
                          for n, src in (("visible", v.visible), ("hidden", v.hidden))]
        spec["reference"] = v.reference
        cases = [_run(c, "robustness") for c in _cases(v.extra.get("robustness", ""), "extra.robustness")]
        has_gen = bool(v.extra.get("generator")) and bool(v.reference)
        # Without a generator, a script with a reference still gets near inputs of its visible cases.
        default = DEFAULT_RANDOM if has_gen else NEAR_SCRIPTS if v.reference else 0
        spec["robustness"] = {"cases": cases, **_random(task, default=default)}
    return spec


def expected_ids(spec: dict) -> dict[str, list[str]]:
    """Every test id the harness must report for `spec`, by layer, in order."""
    out: dict[str, list[str]] = {}
    for layer in spec["layers"]:
        if "check" in layer:
            try:
                n = check_tests(layer["check"])
            except (SyntaxError, ValueError) as exc:
                raise TaskError(f"verifier.{layer['name']}: {exc}") from None
        else:
            n = len(layer.get("cases", layer.get("runs", [])))
        out[layer["name"]] = [f"{layer['name']}/{i}" for i in range(n)]
    rb = spec.get("robustness", {})
    n = len(rb.get("cases", [])) + len(rb.get("inputs", [])) + int(rb.get("count", 0))
    out["robustness"] = [f"robustness/{i}" for i in range(n)]
    return out


@functools.lru_cache(maxsize=4096)
def check_tests(source: str) -> int:
    """How many tests a check source holds (parsed once per distinct source)."""
    return checks.plan_check(source).tests


def _random(task: Task, default: int) -> dict:
    extra = task.verifier.extra
    try:
        count = int(extra.get("random_cases", default))
    except ValueError:
        raise TaskError(f"verifier.extra.random_cases: expected an integer, got {extra['random_cases']!r}") from None
    seed = int.from_bytes(hashlib.sha256(task.task_id.encode()).digest()[:4], "little")
    return {"count": max(count, 0), "seed": seed, "generator": extra.get("generator", "")}


def _cases(text: str, where: str) -> list:
    if not text.strip():
        return []
    try:
        cases = json.loads(text)
    except ValueError as exc:
        raise TaskError(f"verifier.{where}: not JSON: {exc}") from None
    if not isinstance(cases, list):
        raise TaskError(f"verifier.{where}: expected a JSON list of cases")
    return cases


def _args(case, where: str) -> list:
    args = case.get("args") if isinstance(case, dict) else None
    if not isinstance(args, list):
        raise TaskError(f"verifier.{where}: each case needs an 'args' list")
    return wire.encode(args)


def _run(case, where: str) -> dict:
    if not isinstance(case, dict) or not isinstance(case.get("stdin", ""), str):
        raise TaskError(f"verifier.{where}: each case needs 'stdin' text")
    files = case.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(t, str) for t in files.values()):
        raise TaskError(f"verifier.{where}: 'files' must map names to text")
    return {"stdin": case.get("stdin", ""), "files": files}


def _repo_reference(text: str) -> str:
    from judging import repo

    try:
        return repo.program_of(repo.files_of(text)) if text.strip() else ""
    except ValueError as exc:
        raise TaskError(f"verifier.reference: {exc}") from None


def _with_newline(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"
