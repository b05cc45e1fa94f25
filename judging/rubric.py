"""The `verifiers` verifier kind: a verifiers 0.4.0 task's reward methods score the reply, sandboxed.

Consumes a `Task` of kind `verifiers` (written by `envs.verifiers_env`) and the reply;
`build_job` produces the `Job`: `rubric_runner.py` with the verifiers stand-in
(`harness/vf_shim.py`) under `shim/`, the environment's source files under `env/`, and on
stdin the module, the task and data classes, the task's data and the reply. `score` reads
that job's report into a `RubricScore` (pass, fail or dropped: `score` says when). Verifier
extras read here: `module`, `task_class`, `data_class`, `data` (JSON object) and `files`
(JSON object of relative path to source text). It runs nothing itself and does not apply
`[judge.reward]` weights (the rubric's weights are the reward).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from importlib import resources

from bus.messages import ExecutionResult, Job, LayerResult, Task
from judging.attribution import Cause, job_cause
from judging.findings import HackSign
from judging.report import read_report

COMMAND = ["python3", "-I", "rubric_runner.py"]
"The runtime's Python, isolated; site-packages stay on (the tree's numpy is importable)."
EXTRAS = ("module", "task_class", "data_class", "data", "files")


class RubricTaskError(ValueError):
    """The task's verifier data cannot make a rubric job (names the field)."""


@dataclass(frozen=True)
class RubricScore:
    """What a rubric job's report says: outcome, reward and components, cause, evidence."""

    outcome: str
    "'pass', 'fail' or 'dropped'."
    reward: float | None
    components: dict[str, float] = field(default_factory=dict)
    cause: str = ""
    evidence: str = ""
    layers: list[LayerResult] = field(default_factory=list)
    digest: str = ""


@functools.cache
def shipped() -> dict[str, bytes]:
    """The trusted files of every rubric job."""
    root = resources.files("judging.harness")
    shim = root.joinpath("vf_shim.py").read_bytes()
    return {"rubric_runner.py": root.joinpath("rubric_runner.py").read_bytes(),
            "shim/verifiers/__init__.py": b"from verifiers.v1 import __version__  # noqa: F401\n",
            "shim/verifiers/v1/__init__.py": shim,
            "shim/pydantic.py": b"from verifiers.v1 import BaseModel, ConfigDict, Field  # noqa: F401\n"}


def problems(task: Task) -> list[str]:
    """What is missing or malformed in a `verifiers` verifier record (empty when usable)."""
    extra = task.verifier.extra
    out = [f"verifier.extra.{name}: missing" for name in EXTRAS if not extra.get(name)]
    for name in ("data", "files"):
        if extra.get(name):
            try:
                if not isinstance(json.loads(extra[name]), dict):
                    out.append(f"verifier.extra.{name}: expected a JSON object")
            except ValueError as exc:
                out.append(f"verifier.extra.{name}: not JSON ({exc})")
    return out


def build_job(task: Task, reply: str, nonce: str) -> Job:
    """The job that scores `reply` with the task's reward methods."""
    found = problems(task)
    if found:
        raise RubricTaskError("; ".join(found))
    extra = task.verifier.extra
    env_files = {f"env/{path}": text.encode() for path, text in json.loads(extra["files"]).items()}
    spec = {"v": 1, "nonce": nonce, "module": extra["module"], "task_class": extra["task_class"],
            "data_class": extra["data_class"], "data": json.loads(extra["data"]), "reply": reply,
            "budget_s": round(max(task.limits.timeout_s * 0.8 - 0.2, 0.2), 3)}
    return Job(command=list(COMMAND), files={**env_files, **shipped()}, runtime=task.runtime,
               stdin=json.dumps(spec).encode(), limits=task.limits)


def score(task: Task, job: Job, result: ExecutionResult) -> RubricScore:
    """The score of a finished rubric job (or why it gives none):

    - reward: the rubric's own total, as verifiers' `Trace.reward` defines it (the sum of score
      times weight over the recorded rewards); components: each reward's score times weight;
    - pass: the total reaches the best the weights allow (every positive-weight reward at 1,
      every negative-weight one at 0); otherwise fail (`model.wrong_answer`);
    - dropped (no reward): the rubric raised, timed out or ended without scores
      (`infra.rubric_error`, `infra.rubric_timeout`), the sandbox failed (`infra.sandbox`), or a
      score was missing, NaN or outside [0, 1] (`infra.bad_task`, naming the reward)."""
    nonce = json.loads(job.stdin)["nonce"]
    report = read_report(result, nonce)
    structure = LayerResult(name="structure", passed=1, total=1, ok=True)
    if result.sandbox_failed or result.status == "sandbox_error":
        cause = job_cause(result, report, task.limits.memory_mb) or Cause("infra.sandbox", result.sandbox_error)
        return dropped(cause, structure)
    if report.infra:
        kind = "infra.rubric_timeout" if report.infra[0].startswith("rubric_timeout") else "infra.rubric_error"
        return dropped(Cause(kind, "; ".join(report.infra)[-2000:]), structure)
    if not (report.started and report.ended and report.nonce_ok):
        kind = "infra.rubric_timeout" if result.status == "timeout" else "infra.rubric_error"
        return dropped(Cause(kind, f"the rubric runner ended without its report ({result.status}, "
                                   f"exit {result.exit_code}): {result.stderr[-1000:]}"), structure)
    bad = [why for why in map(_invalid, report.rewards) if why]
    if bad or not report.rewards:
        why = "; ".join(bad) or "the task recorded no reward (it has no @vf.reward method?)"
        return dropped(Cause("infra.bad_task", why), structure)
    return judged(report.rewards, structure)


def _invalid(record: dict) -> str:
    name, value, weight = record.get("name"), record.get("score"), record.get("weight")
    if not isinstance(value, (int, float)) or math.isnan(value):
        return f"reward {name!r} gave {value!r}: a score must be a number in [0, 1]"
    if not 0.0 <= value <= 1.0:
        return (f"reward {name!r} gave {value!r}: a score must lie in [0, 1] (scale it with "
                "@vf.reward(weight=...) instead)")
    if not isinstance(weight, (int, float)) or not math.isfinite(weight):
        return f"reward {name!r} has weight {weight!r}: a weight must be a finite number"
    return ""


def judged(records: list[dict], structure: LayerResult) -> RubricScore:
    """A score the rubric gave: its total and components, pass or fail."""
    parts = {str(r["name"]): round(float(r["score"]) * float(r["weight"]), 6) for r in records}
    full = [r for r in records if float(r["score"]) == (1.0 if r["weight"] >= 0 else 0.0)]
    total = sum(float(r["score"]) * float(r["weight"]) for r in records)
    best = sum(max(float(r["weight"]), 0.0) for r in records)
    passed = total >= best - 1e-9
    detail = "; ".join(f"{r['name']}={r['score']:g}x{r['weight']:g}" for r in records)[:500]
    rubric = LayerResult(name="rubric", passed=len(full), total=len(records), ok=passed, detail=detail)
    digest = hashlib.sha256(json.dumps(sorted(parts.items())).encode()).hexdigest()[:32]
    if passed:
        return RubricScore("pass", round(total, 6), parts, "", "", [structure, rubric], digest)
    short = "; ".join(f"{r['name']}={r['score']:g}" for r in records if r not in full)
    return RubricScore("fail", round(total, 6), parts, "model.wrong_answer",
                       f"below full score: {short}"[:2000], [structure, rubric], digest)


def dropped(cause: Cause, structure: LayerResult) -> RubricScore:
    """No score: an infrastructure cause, with no reward."""
    return RubricScore("dropped", None, {}, cause.cause, cause.evidence, [structure])


_SKIPS = ("SkipTest", "Skipped", "KeyboardInterrupt", "SystemExit", "GeneratorExit")


def hack_signs(job: Job, result: ExecutionResult) -> list[HackSign]:
    """`HackSign`s of a rubric job, read before any drop: built-ins the scoring
    replaced (`patched_framework`); a reward record the runner did not write, a repeated or
    missing `start`/`end` (`fake_pass`); the scoring process ended
    cleanly without scores, or by a skip or exit exception (`early_exit`, `skip_tests`); the
    runner killed before its end while the job itself was not (`tamper`)."""
    nonce = json.loads(job.stdin)["nonce"]
    report = read_report(result, nonce)
    records = _records(result, nonce)
    signs = []
    if report.patched:
        signs.append(HackSign("patched_framework", f"the scoring replaced {report.patched[:8]}"))
    kinds = [r.get("k") for r in records]
    rewards = [json.dumps({k: r.get(k) for k in ("k", "name", "score", "weight")}, sort_keys=True)
               for r in records if r.get("k") == "reward"]
    end = next((r for r in records if r.get("k") == "end"), {})
    if kinds.count("start") > 1 or kinds.count("end") > 1 or not report.nonce_ok:
        signs.append(HackSign("fake_pass", f"the report holds {kinds.count('start')} start and "
                                           f"{kinds.count('end')} end records (nonce ok: {report.nonce_ok})"))
    elif report.ended and (end.get("rewards") != len(rewards) or end.get("rewards_digest")
                           != hashlib.sha256("\n".join(rewards).encode()).hexdigest()):
        signs.append(HackSign("fake_pass", f"{len(rewards)} reward records, {end.get('rewards')} "
                                           "written by the rubric runner"))
    # A score outside [0, 1] that the runner itself wrote is the rubric's own: a bad task (`score`).
    problem = "; ".join(report.infra)
    if "ended without scores (exit code 0)" in problem:
        signs.append(HackSign("early_exit", "the scoring process exited with status 0 before its scores"))
    raised = next((name for name in _SKIPS if f"\n{name}" in problem or f"{name}:" in problem
                   or f".{name}" in problem), "")
    if raised:
        kind = "early_exit" if raised == "SystemExit" else "skip_tests"
        signs.append(HackSign(kind, f"the scoring raised {raised}"))
    if report.started and not report.ended and result.signal is not None and result.status not in ("timeout", "oom") \
            and not result.sandbox_failed:
        signs.append(HackSign("tamper", f"the rubric runner was killed by signal {result.signal} before its end"))
    return signs


def _records(result: ExecutionResult, nonce: str) -> list[dict]:
    """Every JSON record of the report, in order (`read_report` keeps a summary)."""
    text = result.report
    if not text:
        tag = f"\x1ewhet-report:{nonce} "
        text = "\n".join(line[len(tag):] for line in result.stderr.split("\n") if line.startswith(tag))
    out = []
    for line in text.split("\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out
