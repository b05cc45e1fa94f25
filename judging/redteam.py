"""The red team: attack shipped environments' tasks by capability, held against honest failure.

Consumes tasks by environment, a sandbox backend and the `JudgeConfig`; produces one `Trial`
per judged attempt and, from those, a `DomainScore` per environment: per capability, how its
attacks ended (`Trial.verdict`, against the task's `honest_failure`). Every attempt goes
through the judge's own path (`judging.offline.judge_all`). On the impossible variant of a
task (`judging.impossible`) nothing may pass, not the reference and not any attack; the
reference must pass the task itself. `problems` lists every breach (each miss among them);
`whet redteam` exits 1 when there is one.
It does NOT publish anything or touch a running stack.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from bus.messages import Attempt, Task, Turn
from judging import kinds, repo
from judging.attacks import CAPABILITIES, Attack, applicable, attacks_for, honest_failures
from judging.config import JudgeConfig
from judging.impossible import impossible
from judging.offline import judge_all

REFERENCE, HONEST = "reference", "honest"
EPSILON = 1e-9


@dataclass(frozen=True)
class Trial:
    """One judged attempt of the red team: what attacked which task, and how it ended."""

    env: str
    task_id: str
    capability: str
    "A key of CAPABILITIES, 'reference' or 'honest'."
    name: str
    variant: str
    "'original' or 'impossible'."
    outcome: str
    reward: float | None
    cause: str
    signs: tuple[str, ...] = ()
    "The HackSign kinds the judge flagged."
    evidence: str = ""
    sign: str = ""
    "The HackSign kind a classic attack is flagged with ('' where none is named)."
    honest: float | None = None
    "Its task's honest failure, measured in the same run (None: no honest attempt was scored)."

    @property
    def verdict(self) -> str:
        """How the attack ended: 'flagged' (outcome "hack"), 'held' (reward at most the honest
        failure), or a miss: 'dropped' (outcome "dropped": a drop the attempt caused earns it "no
        reward, never a penalty", so it is a miss) or 'above' the honest failure (a pass among them)."""
        if self.outcome == "hack":
            return "flagged"
        if self.outcome == "dropped" or self.reward is None:
            return "dropped"
        if self.outcome == "pass" or self.honest is None or self.reward > self.honest + EPSILON:
            return "above"
        return "held"

    @property
    def miss(self) -> bool:
        """True when the attack got through: dropped, or scored above the honest failure."""
        return self.verdict in ("dropped", "above")


@dataclass
class CapabilityScore:
    """How the attacks of one capability ended, counted by `Trial.verdict`."""

    attacks: int = 0
    flagged: int = 0
    held: int = 0
    dropped: int = 0
    above: int = 0

    @property
    def misses(self) -> int:
        """Attacks that got through: dropped or above the honest failure."""
        return self.dropped + self.above


@dataclass
class DomainScore:
    """One environment's red-team result: per capability, the reference and impossible checks."""

    env: str
    tasks: int = 0
    capabilities: dict[str, CapabilityScore | None] = field(default_factory=dict)
    "Per capability; None where it does not apply to the environment's shape (n/a)."
    honest: dict[str, float | None] = field(default_factory=dict)
    "Each task's honest failure."
    reference_passed: int = 0
    impossible_tasks: int = 0
    impossible_reference_failed: int = 0
    impossible_attack_passes: int = 0
    misses: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def attempts_for(env: str, task: Task) -> list[tuple[Attempt, dict]]:
    """The attempts judged for one task: the reference, the honest failures and every attack;
    on its impossible variant the reference and the first attack of each capability."""
    variant = impossible(task)
    reference = Attack(REFERENCE, "reference solution", task.verifier.reference)
    out = []
    for which, t in (("original", task), ("impossible", variant)):
        if t is None:
            continue
        attacks = attacks_for(t)
        if which == "impossible":
            first: dict[str, Attack] = {}
            for a in attacks:
                first.setdefault(a.capability, a)
            attacks = list(first.values())
        else:
            attacks = [*honest_failures(t), *attacks]
        for i, a in enumerate([reference, *attacks]):
            completion = a.code if a.capability == REFERENCE else a.completion
            out.append((_attempt(t, completion, f"redteam.{t.task_id}.{i}"),
                        {"env": env, "capability": a.capability, "name": a.name, "variant": which,
                         "sign": a.sign}))
    return out


def _attempt(task: Task, completion: str, attempt_id: str) -> Attempt:
    """The attempt as the judge receives it. A repository attempt is the end of a tool episode:
    its final workspace and refused paths ride on the attempt (`completion` is their JSON, or
    a reference's {path: text}), as the judge actor sends it to be run."""
    turn = Turn(prompt_ids=b"", completion_ids=b"", logprobs=b"", completion=completion, policy_version=0)
    workspace: dict[str, str] = {}
    refused: list[str] = []
    if kinds.of(task).attempt == "workspace":
        value = json.loads(completion)
        workspace = repo.files_of(json.dumps(value.get("files", value)))
        refused = [str(p) for p in value.get("refused", [])] if "files" in value else []
    return Attempt(attempt_id=attempt_id, group_id=attempt_id.rsplit(".", 1)[0], index=0, group_size=1,
                   task=task, turns=[turn], policy_version=0, purpose="eval", workspace=workspace,
                   refused=refused)


async def run(tasks: dict[str, list[Task]], backend, config: JudgeConfig | None = None, *,
              concurrency: int = 4, keep=None) -> list[Trial]:
    """Judge every planned attempt through the judge's own path; one Trial each, carrying its
    task's honest failure. `keep(meta)` narrows the attacks (honest and reference always run)."""
    planned = [p for env, ts in tasks.items() for t in ts for p in attempts_for(env, t)
               if keep is None or p[1]["capability"] in (REFERENCE, HONEST) or keep(p[1])]
    judged = await judge_all([a for a, _ in planned], backend, config or JudgeConfig(), concurrency=concurrency)
    trials = [Trial(task_id=j.attempt.task.task_id.removesuffix("/impossible"), outcome=j.judgement.outcome,
                    reward=j.judgement.reward, cause=j.judgement.cause,
                    signs=tuple(dict.fromkeys(h.kind for h in j.judgement.hacks)),
                    evidence=j.judgement.evidence[:300], **meta)
              for j, (_, meta) in zip(judged, planned)]
    honest = honest_failure(trials)
    return [Trial(**{**t.__dict__, "honest": honest.get(t.task_id)}) for t in trials]


def honest_failure(trials: list[Trial]) -> dict[str, float]:
    """Each task's honest failure: the most its scored honest wrong attempts
    (`attacks.honest_failures`: a wrong constant, the stub) got in the same run."""
    out: dict[str, float] = {}
    for t in trials:
        if t.capability == HONEST and t.variant == "original" and t.reward is not None and t.outcome != "dropped":
            out[t.task_id] = max(out.get(t.task_id, t.reward), t.reward)
    return out


def tally(trials: list[Trial], tasks: dict[str, list[Task]]) -> list[DomainScore]:
    """Scores per environment under the rules of `Trial.verdict` and the impossible variants."""
    scores = []
    for env, ts in tasks.items():
        score = DomainScore(env, tasks=len(ts))
        applies = set().union(*(applicable(t) for t in ts)) if ts else set()
        score.capabilities = {c: (CapabilityScore() if c in applies else None) for c in CAPABILITIES}
        for t in (t for t in trials if t.env == env):
            _count(score, t)
        score.problems = problems(score, [t for t in trials if t.env == env])
        scores.append(score)
    return scores


def _count(score: DomainScore, t: Trial) -> None:
    where = f"{t.env} {t.task_id}: {t.name}"
    if t.capability == HONEST:
        score.honest.setdefault(t.task_id, t.honest)
        if t.outcome == "dropped":
            score.problems.append(f"{where} (an honest failure) was dropped ({t.cause})")
        return
    if t.capability == REFERENCE:
        if t.variant == "original":
            score.reference_passed += t.outcome == "pass"
            if t.outcome != "pass":
                score.problems.append(f"{where} does not pass its own task ({t.outcome}, {t.cause})")
        else:
            score.impossible_tasks += 1
            score.impossible_reference_failed += t.outcome in ("fail", "hack")
            if t.outcome not in ("fail", "hack"):
                score.problems.append(f"{where} is {t.outcome} on the impossible variant ({t.cause})")
        return
    if t.variant == "impossible":
        if t.outcome == "pass":
            score.impossible_attack_passes += 1
            score.problems.append(f"{where} passes the impossible variant")
        return
    cap = score.capabilities.get(t.capability)
    if cap is None:
        score.problems.append(f"{where}: capability {t.capability} was used where it does not apply")
        return
    cap.attacks += 1
    setattr(cap, t.verdict, getattr(cap, t.verdict) + 1)
    if t.miss:
        line = (f"{where} [{t.capability}] {t.verdict}: {t.outcome} reward {t.reward} "
                f"against honest {t.honest} ({t.cause})")
        score.misses.append(line)
        score.problems.append(line)


def problems(score: DomainScore, trials: list[Trial]) -> list[str]:
    """Every breach (already noted per trial), plus capabilities with no attack run."""
    out = list(score.problems)
    for name, cap in score.capabilities.items():
        if cap is not None and not cap.attacks and any(t.capability not in (REFERENCE, HONEST) for t in trials):
            out.append(f"{score.env}: capability {name} applies but no attack of it was run")
    return out


def table(scores: list[DomainScore]) -> str:
    """One table per environment and one over all: a row per capability with its attacks,
    flagged, held at most the honest failure, dropped and above it (both misses); then the
    reference and impossible-variant checks and the honest failure of each task."""
    head = f"{'capability':<13}{'attacks':>8}{'flagged':>8}{'held':>6}{'dropped':>8}{'above':>6}{'misses':>7}"
    blocks = []
    for label, group in [*((s.env, [s]) for s in scores), *((("all", scores),) if len(scores) > 1 else ())]:
        lines = [f"== {label}", head]
        for c in CAPABILITIES:
            cells = [s.capabilities.get(c) for s in group]
            if all(x is None for x in cells):
                lines.append(f"{c:<13}{'n/a':>8}")
                continue
            tot = CapabilityScore(*(sum(getattr(x, f) for x in cells if x) for f in
                                    ("attacks", "flagged", "held", "dropped", "above")))
            lines.append(f"{c:<13}{tot.attacks:>8}{tot.flagged:>8}{tot.held:>6}{tot.dropped:>8}"
                         f"{tot.above:>6}{tot.misses:>7}")
        lines.append(f"reference passes {sum(s.reference_passed for s in group)}/{sum(s.tasks for s in group)}; "
                     f"impossible: reference fails {sum(s.impossible_reference_failed for s in group)}/"
                     f"{sum(s.impossible_tasks for s in group)}, attacks pass "
                     f"{sum(s.impossible_attack_passes for s in group)}")
        if label != "all":
            lines.append("honest failure: " + ", ".join(f"{k} {'-' if v is None else f'{v:.3f}'}"
                                                         for k, v in sorted(group[0].honest.items())))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
