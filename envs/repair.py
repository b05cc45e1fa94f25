"""Failures reused: a tool episode the model failed becomes a repair task that starts where it
ended (self-correction practice).

Consumes a final train `Verdict`; produces the repair `Task` (`repair_task`), or None with
the reason (`repair_refusal`: only a train attempt at a train task, never anything derived
from a held-out one). A repair task keeps the source task's verifier, so its gate outcome
is its source's: it is not gated again. Pure: it runs nothing and admits nothing (the
sampler does).
"""

from __future__ import annotations

import msgspec

from bus.messages import Task, Verdict
from judging.tools import is_tool_task
from sandbox.workspace import digest_of

REPAIR_OF = "repair_of"
"`Verifier.extra` key naming the task a repair task was derived from."
NOTE_CHARS = 1200
"Most characters of the last visible test run quoted in a repair task's prompt."


def repair_refusal(verdict: Verdict) -> str:
    """Why `verdict` gives no repair task ('' when it gives one). Only these give one: a train
    attempt at a train task (a held-out or validation task never yields one, so nothing derived
    from a held-out task is ever trained on), a tool episode, outcome 'fail' with a `model.*`
    cause (not an infrastructure drop, not a hack), a workspace that differs from the task's
    start (doing nothing gives nothing new), and a task that is not itself a repair task (one
    level, no chains)."""
    attempt, task = verdict.attempt, verdict.attempt.task
    if attempt.purpose != "train" or task.split != "train":
        return f"{task.split} task, {attempt.purpose} attempt: only train tasks are reused"
    if not is_tool_task(task):
        return "not a tool episode"
    if REPAIR_OF in task.verifier.extra:
        return "already a repair task"
    if verdict.outcome != "fail" or not verdict.cause.startswith("model."):
        return f"outcome {verdict.outcome} ({verdict.cause or 'no cause'}): not a model failure"
    if not attempt.workspace or attempt.workspace == dict(task.files):
        return "the workspace is as the task started"
    return ""


def repair_task(verdict: Verdict) -> Task | None:
    """The repair task a failed attempt gives, or None (`repair_refusal` says why).

    It keeps the source task's verifier (hidden tests, reference, budgets, `touched`), domain
    and rung; its starting workspace (`files`) is the failed attempt's last workspace, and its
    prompt is the source's followed by what went wrong (`what_went_wrong`). Its id is
    `<source id>-repair-<12 hex of the workspace hash>`, so one failed workspace gives one task
    however often it is seen. Its split is always 'train'."""
    if repair_refusal(verdict):
        return None
    attempt, task = verdict.attempt, verdict.attempt.task
    files = dict(attempt.workspace)
    verifier = msgspec.structs.replace(
        task.verifier, extra={**task.verifier.extra, REPAIR_OF: task.task_id})
    return msgspec.structs.replace(
        task, task_id=f"{task.task_id}-repair-{digest_of(files)[:12]}", split="train",
        prompt=task.prompt + "\n\n" + what_went_wrong(verdict), files=files, verifier=verifier)


def what_went_wrong(verdict: Verdict) -> str:
    """The note a repair task's prompt ends with: the cause, how many hidden tests failed
    (counts only, as multi-turn feedback shows them), and the attempt's last run of the visible
    tests when the workspace did not change after it."""
    lines = [("A previous attempt left the repository as it is now and submitted it, but it "
              f"is not fixed yet ({verdict.cause}).")]
    hidden = next((layer for layer in verdict.layers if layer.name == "hidden"), None)
    if hidden is not None and hidden.total:
        lines.append(f"{hidden.total - hidden.passed} of {hidden.total} hidden tests failed.")
    last = last_visible_run(verdict)
    if last:
        lines.append("Its last run of the visible tests, on the repository as it is now:\n"
                     + last[-NOTE_CHARS:])
    lines.append("Find what is still wrong, fix it, and submit.")
    return "\n".join(lines)


def last_visible_run(verdict: Verdict) -> str:
    """The output of the attempt's last run of all visible tests, if nothing changed after it."""
    attempt = verdict.attempt
    final = attempt.steps[-1].next_state if attempt.steps else ""
    for i in range(len(attempt.tool_calls) - 1, -1, -1):
        call = attempt.tool_calls[i]
        if call.name == "run_tests" and not call.arguments.get("test"):
            same = i < len(attempt.steps) and attempt.steps[i].next_state == final and final
            return attempt.turns[i].feedback if same and i < len(attempt.turns) else ""
    return ""
