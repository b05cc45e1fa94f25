"""Shared pieces of the judging tests: a real sandbox backend, tasks and attempts.

Jobs run `python3` from PATH; the fixture puts this interpreter's directory first, so the
unisolated baseline backend starts a real Python rather than a slow version-manager shim.
"""

from __future__ import annotations

import functools
import json
import os
import sys

import pytest

from bus.messages import Attempt, Limits, Task, Turn, Verifier
from envs.humaneval import import_file
from judging.config import JudgeConfig
from judging.offline import Judged, judge_all
from sandbox.config import SandboxConfig
from sandbox.plain import PlainBackend


@pytest.fixture
def backend(monkeypatch):
    """The plain subprocess backend with this Python first on PATH."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    return PlainBackend(SandboxConfig())


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


async def judge(backend, attempts: list[Attempt], config: JudgeConfig = JudgeConfig(),
                concurrency: int = 4) -> list[Judged]:
    return await judge_all(attempts, backend, config, concurrency=concurrency)


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
