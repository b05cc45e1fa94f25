"""Quality gates at intake: a task is accepted only if its reference and tests hold up.

Consumes a `Task`, a sandbox backend and `GateConfig`; produces a `GateReport` (accepted, or
rejected with reasons: the gates are `gate_task`'s) and tallies of rejections by reason.
Code runs only through the judging API (`judging.verify.check_code`), the same path the
judge scores attempts with. Difficulty is not a gate here: the sampler grades it from
measured pass rates over time. An infrastructure failure (sandbox down) is its own reason,
never blamed on the task.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import anyio
import msgspec

from bus.messages import Task
from envs.config import GateConfig
from judging import kinds
from judging.jobs import TaskError
from envs.mutants import Mutant, json_mutants, python_mutants

@dataclass
class GateReport:
    """What the gates found for one task."""

    task_id: str
    accepted: bool = True
    reasons: list[str] = field(default_factory=list)
    "Rejection reasons: invalid, unsolvable, nondeterministic, weak_tests, infra."
    detail: list[str] = field(default_factory=list)
    mutants: int = 0
    killed: int = 0
    survivors: list[str] = field(default_factory=list)
    "Descriptions of the mutants the tests did not kill."
    seconds: float = 0.0

    @property
    def kill_rate(self) -> float | None:
        return self.killed / self.mutants if self.mutants else None

    def reject(self, reason: str, detail: str) -> None:
        self.accepted = False
        self.reasons.append(reason)
        self.detail.append(detail)


@dataclass
class GateTally:
    """Accepted tasks and rejections by reason, for reports and gauges."""

    accepted: int = 0
    rejected: Counter = field(default_factory=Counter)

    def add(self, report: GateReport) -> None:
        if report.accepted:
            self.accepted += 1
        else:
            self.rejected.update(report.reasons)


def validity_problems(task: Task) -> list[str]:
    """What is missing or malformed in the verifier record (empty when it is usable)."""
    v = task.verifier
    problems = []
    if v.kind not in kinds.KINDS:
        return [f"verifier.kind: {v.kind!r} is not one of {list(kinds.NAMES)}"]
    kind = kinds.of(task)
    if kind.gated_by == "rubric":
        from judging.rubric import problems as rubric_problems

        return rubric_problems(task)
    if not v.reference.strip():
        problems.append("verifier.reference: empty (the solvability gate needs one)")
    if kind.names_entry_point and not task.entry_point:
        problems.append(f"entry_point: {kind.name} tasks name the function to call")
    lists = kind.case_lists
    lists += ("extra.robustness",) if "robustness" in v.extra else ()
    lists += kind.rule_lists
    for name in lists:
        text = v.extra["robustness"] if name == "extra.robustness" else getattr(v, name)
        try:
            value = json.loads(text) if text.strip() else []
        except ValueError as exc:
            problems.append(f"verifier.{name}: not JSON ({exc})")
            continue
        if not isinstance(value, list):
            problems.append(f"verifier.{name}: expected a JSON list")
    if kind.attempt == "workspace":
        try:
            from judging import repo

            repo.files_of(v.reference)
        except ValueError as exc:
            problems.append(f"verifier.reference: {exc}")
    if kind.attempt == "document":
        try:
            json.loads(v.extra.get("schema", "{}"))
            json.loads(v.reference)
        except ValueError as exc:
            problems.append(f"verifier.extra.schema or reference: not JSON ({exc})")
    if task.limits.timeout_s <= 0 or task.limits.memory_mb <= 0:
        problems.append("limits: timeout_s and memory_mb must be positive")
    if kind.needs_hidden and not v.hidden.strip():
        problems.append(f"verifier.hidden: {kind.name} needs the test source")
    return problems


def mutants_for(task: Task, *, limit: int, seed: int = 0) -> list[tuple[Mutant, str]]:
    """(mutant, code to check) of the task's reference, at most `limit`."""
    v = task.verifier
    how = kinds.of(task).mutants
    if how == "json":
        return [(m, m.source) for m in json_mutants(v.reference, limit=limit, seed=seed)]
    if how == "workspace":
        return _workspace_mutants(task, limit, seed)
    if how == "prefixed":
        # The completion continues the prompt; a mutant is the whole program, whose
        # redefinition of the entry point replaces the prompt's stub.
        prefix = v.extra.get("prefix", "")
        first = prefix.count("\n") + 1
        found = python_mutants(prefix + v.reference, limit=limit, seed=seed, first_line=first)
        return [(m, "\n" + m.source) for m in found]
    return [(m, m.source) for m in python_mutants(v.reference, limit=limit, seed=seed)]


def _workspace_mutants(task: Task, limit: int, seed: int) -> list[tuple[Mutant, str]]:
    """Mutants of the modules the reference fix touches (`extra["touched"]`), each as the
    whole reference workspace with that one module mutated."""
    from judging import repo

    files = repo.files_of(task.verifier.reference)
    touched = [p for p in task.verifier.extra.get("touched", "").split(",") if p in files]
    groups = {path: python_mutants(files[path], seed=seed) for path in touched or sorted(files)
              if path.endswith(".py") and not repo.is_test_path(path)}
    found = [(Mutant(m.operator, f"{path} {m.description}", m.source), path)
             for path, mutants in groups.items() for m in mutants]
    rng = random.Random(seed)
    rng.shuffle(found)
    found = found[:limit] if limit else found
    return [(m, json.dumps({**files, path: m.source})) for m, path in found]


def _quick(task: Task, timeout_s: float) -> Task:
    limits = msgspec.structs.replace(task.limits, timeout_s=min(task.limits.timeout_s, timeout_s),
                                     cpu_s=min(task.limits.cpu_s, timeout_s))
    return msgspec.structs.replace(task, limits=limits)


def mutation_verdict(killed: int, survived: int, total: int, min_rate: float) -> bool | None:
    """True (tests good enough) or False (too weak) once the remaining mutants cannot change
    the answer; None while they still can."""
    need = math.ceil(min_rate * total - 1e-9)
    if killed >= need:
        return True
    if survived > total - need:
        return False
    return None


async def gate_task(task: Task, backend, config: GateConfig,
                    limiter: anyio.CapacityLimiter | None = None) -> GateReport:
    """Run the gates on `task` (each sandboxed run under `limiter`):

    - validity: the verifier record is complete for its kind (parsable case lists, a reference);
    - for a `verifiers` task instead of the three below (it has no reference): its rubric runs in
      the sandbox on an empty reply, without error, and gives it less than the full reward;
    - solvability: the reference passes every test;
    - determinism: a second run of the reference produces the same outputs (digest);
    - mutation: mutants of the reference (`envs.mutants`) must fail; a task whose tests kill
      fewer than `min_kill_rate` of them is rejected, naming the mutants that survived."""
    from judging.verify import check_code  # the judge's scoring path, not a second runner

    limiter = limiter or anyio.CapacityLimiter(config.concurrency)
    report = GateReport(task.task_id)
    started = time.monotonic()

    async def check(t: Task, code: str, skip=lambda: False):
        async with limiter:
            # decided gates start no more runs; runs already started finish (a cancelled
            # sandbox run could leave a looping mutant behind)
            return None if skip() else await check_code(t, code, backend)

    problems = validity_problems(task)
    if problems:
        report.reject("invalid", "; ".join(problems))
        return report
    try:
        if kinds.of(task).gated_by == "rubric":
            await _rubric_gate(task, report, check)
        else:
            await _reference_gates(task, report, config, check)
    except* TaskError as group:  # the judge names the malformed verifier field
        report.reject("invalid", f"the judge rejects the verifier data: {group.exceptions[0]}")
    report.seconds = time.monotonic() - started
    return report


async def _rubric_gate(task: Task, report: GateReport, check) -> None:
    """A verifiers task has no reference: its rubric must run in the sandbox and give an
    empty reply less than the full reward."""
    empty = await check(task, "")
    if empty.cause.startswith("infra"):
        reason = "infra" if empty.cause in ("infra.sandbox", "infra.resource_exhausted") else "invalid"
        report.reject(reason, f"the rubric does not run in the sandbox: {empty.cause}: "
                              f"{empty.evidence[-400:]}")
    elif empty.ok:
        report.reject("weak_tests", "an empty reply gets the full reward")


async def _reference_gates(task: Task, report: GateReport, config: GateConfig, check) -> None:
    runs: list = [None, None]

    async def reference(i: int) -> None:
        runs[i] = await check(task, task.verifier.reference)

    async with anyio.create_task_group() as tg:
        for i in range(2 if "determinism" in config.checks else 1):
            tg.start_soon(reference, i)
    first, second = runs
    if first.cause == "infra.bad_task":  # the judge could not use the verifier data
        report.reject("invalid", f"the judge rejects the verifier data: {first.evidence[:300]}")
    elif first.cause.startswith("infra"):
        report.reject("infra", f"reference run failed in the sandbox: {first.evidence[:200]}")
    elif not first.ok:
        report.reject("unsolvable", f"reference fails: {first.cause} ({first.passed}/"
                                    f"{first.total} tests) {first.evidence[:200]}")
    elif second is not None and second.outputs_digest != first.outputs_digest:
        report.reject("nondeterministic", "two runs of the reference produced different outputs")
    if report.accepted and "mutation" in config.checks:
        await _mutation_gate(task, report, config, check)


async def _mutation_gate(task: Task, report: GateReport, config: GateConfig, check) -> None:
    quick = _quick(task, config.mutant_timeout_s)
    candidates = mutants_for(task, limit=config.max_mutants, seed=config.seed)
    counts = {"infra": 0, "survived": 0}

    def decided() -> bool:
        total = len(candidates) - counts["infra"]
        return mutation_verdict(report.killed, counts["survived"], total,
                                config.min_kill_rate) is not None

    async def run(m: Mutant, code: str) -> None:
        outcome = await check(quick, code, decided)
        if outcome is None:
            return
        if outcome.cause.startswith("infra"):
            counts["infra"] += 1
            return
        report.mutants += 1
        if outcome.ok:
            counts["survived"] += 1
            report.survivors.append(f"{m.operator}: {m.description}")
        else:
            report.killed += 1

    async with anyio.create_task_group() as tg:
        for mutant, code in candidates:
            tg.start_soon(run, mutant, code)
    if counts["infra"]:
        report.detail.append(f"{counts['infra']} mutant runs failed in the sandbox; not counted")
    if report.mutants < len(candidates) - counts["infra"]:
        report.detail.append(f"decided after {report.mutants} of {len(candidates)} mutants")
    total = len(candidates) - counts["infra"]
    if mutation_verdict(report.killed, counts["survived"], total, config.min_kill_rate) is False:
        report.reject("weak_tests", f"tests kill {report.killed} of {report.mutants} mutants run "
                                    f"(need {config.min_kill_rate:.0%} of {total}); survivors: "
                                    + "; ".join(sorted(report.survivors)))
