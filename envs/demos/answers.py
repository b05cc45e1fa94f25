"""Demonstrations of single-turn tasks: the prompt and the gated reference, as an answer.

Consumes gated training tasks whose kind reads a program or a JSON document, a sandbox
backend and the `JudgeConfig`; produces, for each task, its `Demo` (the reference in the
fenced block the judge extracts: ```python for programs, ```json for documents) when the
judge's own path (`judging.offline.judge_all`, a one-turn attempt) passes it, and None when
it does not. Tasks without a reference (rubric kinds) give none. It gates nothing.
"""

from __future__ import annotations

from bus.messages import Attempt, Demo, DemoMessage, Task, Turn
from judging import kinds
from judging.config import JudgeConfig
from judging.offline import judge_all

FENCES = {"program": "python", "document": "json"}
"Attempt kind -> the fence language the judge's extractor reads for it."


def answers(task: Task) -> bool:
    """True when a task's demonstration is its reference as one answer."""
    return kinds.of(task).attempt in FENCES and bool(task.verifier.reference.strip())


def answer_text(task: Task) -> str:
    """The reference written as the model should answer: one fenced block."""
    body = task.verifier.reference.rstrip("\n")
    return f"```{FENCES[kinds.of(task).attempt]}\n{body}\n```"


def _attempt(task: Task, text: str) -> Attempt:
    turn = Turn(prompt_ids=b"", completion_ids=b"", logprobs=b"", completion=text,
                policy_version=0, finish_reason="stop")
    return Attempt(attempt_id=f"demo-{task.task_id}.0", group_id=f"demo-{task.task_id}", index=0,
                   group_size=1, task=task, turns=[turn], policy_version=0)


async def answer_demos(tasks: list[Task], backend, judge: JudgeConfig, *,
                       concurrency: int = 2) -> list[Demo | None]:
    """Each task's demonstration, or None where the judge does not pass its answer."""
    judged = await judge_all([_attempt(t, answer_text(t)) for t in tasks], backend, judge,
                             concurrency=concurrency)
    return [Demo(task_id=j.attempt.task.task_id, env=j.attempt.task.env,
                 domain=j.attempt.task.domain, split="train", level=int(j.attempt.task.difficulty),
                 messages=[DemoMessage(role="user", content=j.attempt.task.prompt),
                           DemoMessage(role="assistant", content=j.attempt.turns[0].completion)],
                 source="reference", outcome=j.judgement.outcome, family=j.attempt.task.family)
            if j.judgement.outcome == "pass" else None for j in judged]
