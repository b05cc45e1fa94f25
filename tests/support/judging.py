"""Shared pieces of the judging tests: a real sandbox backend, tasks and attempts.

Jobs run `python3` from PATH; the fixture puts this interpreter's directory first, so the
unisolated baseline backend starts a real Python rather than a slow version-manager shim.
The task and attempt builders live with the judge benches (`bench/judge/tasks.py`), which
use them too.
"""

from __future__ import annotations

import os
import sys

import pytest

from bench.judge.tasks import attempt, humaneval, io_task  # noqa: F401 - used by the tests
from bus.messages import Attempt
from judging.config import JudgeConfig
from judging.offline import Judged, judge_all
from sandbox.config import SandboxConfig
from sandbox.plain import PlainBackend


@pytest.fixture
def backend(monkeypatch):
    """The plain subprocess backend with this Python first on PATH."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    return PlainBackend(SandboxConfig())


async def judge(backend, attempts: list[Attempt], config: JudgeConfig = JudgeConfig(),
                concurrency: int = 4) -> list[Judged]:
    return await judge_all(attempts, backend, config, concurrency=concurrency)
