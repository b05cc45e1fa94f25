"""Check raw code against a task through every test layer: the API of the task gates.

Consumes a `Task`, raw code (no markdown; for `python_check`, the completion that continues
the prompt prefix, as HumanEval's canonical solutions are written) and a sandbox backend;
produces a `CheckOutcome`. It is the judge's own path (same job, same harness, same scoring)
without a model turn around it: the environments' solvability, mutation and determinism
gates call it. An infrastructure failure is re-run (up to `retries` times) and, if it
persists, reported with `ok=False` and an `infra.*` cause, never as a test failure.

The signature of `check_code` is stable: callers in `envs/` depend on it. It does NOT open
or close the backend (the caller owns it) and does NOT decide what a gate accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

from bus.messages import ExecutionResult, Task
from judging.config import RewardConfig
from judging.extract import from_code
from judging.harness import wire
from judging.jobs import build_job
from judging.judgement import Judgement, before_running, judge_result
from judging.layers import TEST_LAYERS


@dataclass(frozen=True)
class CheckOutcome:
    """Tests passed by a piece of code over every layer, and a digest of what it produced."""

    passed: int
    "Tests passed across the visible, hidden and robustness layers."
    total: int
    "Tests counted across those layers (invalid ones left out)."
    per_layer: dict[str, tuple[int, int]]
    "(passed, total) of every layer, 'structure' included."
    outputs_digest: str
    "Hash of what the code produced (return values, printed output, statuses)."
    result: ExecutionResult
    "What the sandbox returned (an empty 'ok' result when nothing ran)."
    ok: bool
    "True when the structure and every counted test passed."
    outcome: str = ""
    "'pass', 'fail', 'hack' or 'dropped' (infrastructure)."
    cause: str = ""
    "Why it failed ('' when ok), e.g. 'model.wrong_answer', 'infra.sandbox'."
    evidence: str = ""
    "What the cause was read from."
    failing: tuple[str, ...] = ()
    "Ids of the failed tests (e.g. 'hidden/3')."
    reward: float | None = None
    "The reward the judge gives it (None when dropped), with the default weights."


async def check_code(task: Task, code: str, backend, *, retries: int = 2) -> CheckOutcome:
    """Run `code` as an attempt at `task` through every layer and say how it did."""
    cand = from_code(task, code)
    weights = RewardConfig()
    judged = before_running(task, cand, 1, weights)
    result = ExecutionResult(status="ok", backend="none")
    for _ in range(retries + 1):
        if judged is not None and not judged.infra:
            break
        job = build_job(task, cand)
        result = await backend.run(job)
        judged = judge_result(task, cand, job, result, 1, weights)
    return outcome_of(judged, result)


def outcome_of(judged: Judgement, result: ExecutionResult) -> CheckOutcome:
    per_layer = {layer.name: (layer.passed, layer.total) for layer in judged.layers}
    passed = sum(per_layer.get(n, (0, 0))[0] for n in TEST_LAYERS)
    total = sum(per_layer.get(n, (0, 0))[1] for n in TEST_LAYERS)
    digest = judged.digest or wire.digest(f"{judged.cause}|{judged.evidence}")
    failing = tuple(t.id for t in judged.tests if t.passed is False)
    return CheckOutcome(passed=passed, total=total, per_layer=per_layer, outputs_digest=digest,
                        result=result, ok=judged.outcome == "pass", outcome=judged.outcome,
                        cause=judged.cause, evidence=judged.evidence, failing=failing,
                        reward=judged.reward)
