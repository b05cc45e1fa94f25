"""The judgement of one attempt: layers, cause, hack flags and reward, put together.

Consumes a task, the candidate taken from the latest turn, and (for executed kinds) the job
and its `ExecutionResult`; produces a `Judgement`, which becomes a `Verdict`. The order of
decisions is the point of this module (`judge_result` gives it). A `verifiers` task's rubric
decides its score (`judging.rubric`), after its own hack signs. `before_running` answers
without a job when none is needed (code that does not compile, and structured documents);
`truncated` judges an answer cut at the token limit as a failure unread.
Whatever a result holds, it yields one judgement, never an exception (`unjudgeable`: the
model's failure). It does no I/O.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

from bus.messages import Attempt, ExecutionResult, Job, LayerResult, Task, Verdict
from judging import kinds, quality, rubric, structured
from judging.attribution import Cause, attribute
from judging.config import RewardConfig
from judging.extract import Candidate, from_code, from_completion
from judging.findings import HackSign, ScoredTest
from judging.hacks import detect
from judging.harness import wire
from judging.layers import TEST_LAYERS, credit_by_behaviour, layer_results, score_tests
from judging.report import read_report
from judging.reward import compose


@dataclass(frozen=True)
class Judgement:
    """What the judge concluded of one attempt; `verdict` makes it the message."""

    outcome: str
    "'pass', 'fail', 'hack' or 'dropped' (infrastructure: no reward)."
    reward: float | None
    components: dict[str, float]
    cause: str
    evidence: str
    layers: list[LayerResult]
    tests: list[ScoredTest] = field(default_factory=list)
    hacks: list[HackSign] = field(default_factory=list)
    digest: str = ""
    "Hash of what the candidate produced (determinism checks)."

    @property
    def infra(self) -> bool:
        """True when an infrastructure failure dropped the attempt (no reward)."""
        return self.outcome == "dropped"

    @property
    def rerun(self) -> bool:
        """True when running the job again may judge it: an infrastructure drop other than a
        bad task (a broken task stays broken, however often it runs)."""
        return self.infra and self.cause != "infra.bad_task"

    def verdict(self, attempt: Attempt, *, judge: str, retries: int = 0) -> Verdict:
        """The `Verdict` of `attempt` (evidence capped, re-runs noted); trainable when a train
        attempt was not dropped."""
        evidence = self.evidence if not retries else f"{self.evidence} (after {retries} re-runs)"
        return Verdict(verdict_id=attempt.attempt_id, attempt=attempt, outcome=self.outcome,
                       reward=self.reward, components=self.components, cause=self.cause,
                       evidence=evidence[:2000], layers=self.layers,
                       trainable=attempt.purpose == "train" and self.outcome != "dropped",
                       judge=judge, judged_at=time.time(), retries=retries)


def candidate_of(attempt: Attempt) -> Candidate:
    """The candidate in the attempt's latest turn (a tool episode's: its final workspace)."""
    if kinds.of(attempt.task).attempt == "workspace":
        return from_code(attempt.task, json.dumps({"files": attempt.workspace,
                                                   "refused": attempt.refused}))
    if not attempt.turns:
        return from_completion(attempt.task, "")
    last = attempt.turns[-1]
    return from_completion(attempt.task, last.completion, ended=last.finish_reason != "length")


def before_running(task: Task, cand: Candidate, turns: int, weights: RewardConfig) -> Judgement | None:
    """The judgement when nothing needs to run, else None."""
    if not cand.compiles:
        reward, parts = compose(compiled=False, format_ok=cand.format_ok, layers=[], turns=turns,
                                hack=False, weights=weights)
        return Judgement("fail", reward, parts, "model.syntax_error", cand.compile_error,
                         [cand.structure(task), *_empty_layers()])
    if kinds.of(task).attempt == "document":
        return judge_document(task, cand, turns, weights)
    return None


def judge_result(task: Task, cand: Candidate, job: Job, result: ExecutionResult, turns: int,
                 weights: RewardConfig) -> Judgement:
    """The judgement of an executed attempt: always one, whatever the result holds. In order:

    1. hack signs, read before anything else, give it the hack reward, below any honest one
       (`outcome="hack"`), whatever infrastructure cause appeared;
    2. an infrastructure cause proven by the host or the harness (`judging.attribution`) drops
       it: no reward, whatever the tests said;
    3. otherwise the first failed test names the model cause;
    4. it passes only when the structure layer and every counted test passed;
    5. only then, with `[judge.reward.quality]` on, the quality bonuses measured in the job
       (`judging.quality`) join its reward, each its own component."""
    try:
        if kinds.of(task).job == "rubric":
            return from_rubric(rubric.score(task, job, result), rubric.hack_signs(job, result), weights)
        return _judge_executed(task, cand, job, result, turns, weights)
    except Exception as exc:  # noqa: BLE001 - one attempt's judgement never stops the judge
        return unjudgeable(turns, weights, f"{type(exc).__name__}: {exc}")


def _judge_executed(task: Task, cand: Candidate, job: Job, result: ExecutionResult, turns: int,
                    weights: RewardConfig) -> Judgement:
    spec = json.loads(job.stdin)
    report = read_report(result, spec["nonce"])
    scored = score_tests(task, spec, report)
    hacks = detect(task, cand, result, report, scored)  # before any drop, whatever else happened
    tests = credit_by_behaviour(scored)
    layers = [cand.structure(task), *layer_results(tests)]
    cause = attribute(task, result, report, tests)
    if cause is not None and cause.infra and not hacks:
        return dropped(cause, layers, tests)
    if not hacks and cause is None and not sum(layer.total for layer in layers[1:]):
        return dropped(Cause("infra.sandbox", "no test counted: the task has no valid tests"), layers, tests)
    return conclude(cand, layers, tests, hacks, cause, turns, weights, report.digest, report.quality)


def truncated(turns: int, weights: RewardConfig) -> Judgement:
    """A training answer cut at the token limit, with `[judge] truncated = "fail"`: the
    model's failure whatever its text holds, scored as code that does not compile."""
    why = "the answer was cut at the token limit"
    reward, parts = compose(compiled=False, format_ok=False, layers=[], turns=turns, hack=False,
                            weights=weights)
    layers = [LayerResult(name="structure", total=1, detail=why),
              *(LayerResult(name=n, detail=f"not run: {why}") for n in TEST_LAYERS)]
    return Judgement("fail", reward, parts, "model.truncated", why, layers)


def unjudgeable(turns: int, weights: RewardConfig, why: str) -> Judgement:
    """What cannot be judged is the model's failure, with no test passed; never a drop (a drop
    would be a free re-run) and never an exception."""
    layers = [LayerResult(name="structure", detail=why[:500]),
              *(LayerResult(name=n, detail="not judged") for n in TEST_LAYERS)]
    reward, parts = compose(compiled=True, format_ok=False, layers=layers, turns=turns, hack=False,
                            weights=weights)
    return Judgement("fail", reward, parts, "model.unjudgeable",
                     f"the attempt's result could not be judged: {why}"[:2000], layers)


def conclude(cand: Candidate, layers: list[LayerResult], tests: list[ScoredTest],
             hacks: list[HackSign], cause: Cause | None, turns: int, weights: RewardConfig,
             digest: str, measured: dict | None = None) -> Judgement:
    """Outcome first, then the reward: quality bonuses go to a pass and to nothing else."""
    def reward_of(quality: dict[str, float] | None = None,
                  format_ok: bool = cand.format_ok) -> tuple[float, dict[str, float]]:
        return compose(compiled=True, format_ok=format_ok, layers=layers, turns=turns,
                       hack=bool(hacks), weights=weights, quality=quality)

    if hacks:
        return Judgement("hack", *reward_of(), hacks[0].cause,
                         "; ".join(f"{h.kind}: {h.evidence}" for h in hacks)[:2000],
                         layers, tests, hacks, digest)
    if cause is None and not layers[0].ok:
        cause = Cause("model.format", layers[0].detail)
    if cause is not None:
        crash_bonus = weights.crash_keeps_format or cause.cause != "model.runtime_error"
        return Judgement("fail", *reward_of(format_ok=cand.format_ok and crash_bonus),
                         cause.cause, cause.evidence, layers, tests, [], digest)
    if not weights.quality.on:
        return Judgement("pass", *reward_of(), "", "", layers, tests, [], digest)
    measured = measured or {}
    reward, parts = reward_of(quality.bonuses(weights.quality, measured))
    return Judgement("pass", reward, parts, "", quality.evidence(measured), layers, tests, [], digest)


def from_rubric(scored: rubric.RubricScore, hacks: list[HackSign], weights: RewardConfig) -> Judgement:
    """A verifiers rubric's score as a judgement: its reward as it is, unless the job shows hack
    signs, read before any drop: then the hack reward, whatever the rubric or the job said."""
    if hacks:
        return Judgement("hack", weights.hack_reward, {"hack": weights.hack_reward}, hacks[0].cause,
                         "; ".join(f"{h.kind}: {h.evidence}" for h in hacks)[:2000], scored.layers,
                         hacks=hacks, digest=scored.digest)
    return Judgement(scored.outcome, scored.reward, scored.components, scored.cause,
                     scored.evidence, scored.layers, digest=scored.digest)


def dropped(cause: Cause, layers: list[LayerResult], tests: list[ScoredTest]) -> Judgement:
    """An infrastructure drop: no reward, whatever the tests said."""
    return Judgement("dropped", None, {}, cause.cause, cause.evidence, layers, tests)


def judge_document(task: Task, cand: Candidate, turns: int, weights: RewardConfig) -> Judgement:
    """Structured tasks: schema into the structure layer, content rules into visible/hidden."""
    v = task.verifier
    try:
        schema = json.loads(v.extra.get("schema", "{}") or "{}")
        rules = [(layer, structured.rules_of(text, layer)) for layer, text in (("visible", v.visible), ("hidden", v.hidden))]
    except ValueError as exc:
        return dropped(Cause("infra.bad_task", f"structured verifier data: {exc}"), [], [])
    try:
        violations = structured.schema_errors(cand.value, schema)
        tests = [ScoredTest(f"{layer}/{i}", layer, ok, "ok" if ok else "wrong", detail, {})
                 for layer, layer_rules in rules
                 for i, (ok, detail) in enumerate(structured.check_rule(cand.value, r) for r in layer_rules)]
    except re.error as exc:
        return dropped(Cause("infra.bad_task", f"structured verifier pattern: {exc}"), [], [])
    base = cand.structure(task)
    structure = LayerResult(name="structure", passed=base.passed + (not violations), total=base.total + 1,
                            ok=base.ok and not violations,
                            detail="; ".join(filter(None, [base.detail, *violations[:5]]))[:500])
    layers = [structure, *layer_results(tests)]
    failed = [t for t in tests if t.passed is False]
    cause = Cause("model.wrong_answer", f"{failed[0].id}: {failed[0].detail}") if failed else None
    if cause is None and violations:
        cause = Cause("model.format", "; ".join(violations[:5]))
    graded = Candidate(cand.code, format_ok=cand.format_ok and not violations, value=cand.value)
    digest = wire.digest(wire.dumps(wire.encode(cand.value)))
    if not tests and cause is None:
        return dropped(Cause("infra.sandbox", "no test counted: the task has no content rules"), layers, tests)
    return conclude(graded, layers, tests, [], cause, turns, weights, digest)


def _empty_layers() -> list[LayerResult]:
    return [LayerResult(name=n, detail="not run: the code does not compile") for n in TEST_LAYERS]
