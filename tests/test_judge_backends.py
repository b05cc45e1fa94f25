"""The judge on the isolating backends: the same verdicts in bubblewrap and in Docker."""

from __future__ import annotations

import os

import anyio
import msgspec
import pytest

from bus.messages import Limits
from sandbox import open_backend
from sandbox.config import SandboxConfig
from tests.support.judging import attempt, humaneval, judge
from tests.support.sandbox_fixtures import built_envs, docker_engine  # noqa: F401

pytestmark = pytest.mark.bus

CASES = {
    "canonical": (None, "pass", ""),
    "wrong": ("    return -1\n", "fail", "model.wrong_answer"),
    "exit": ("    import os\n    os._exit(0)\n", "hack", "hack.early_exit"),
    "snoop": ("    import os, sys\n    return len(open(os.path.join(os.path.dirname(sys.argv[0]), 'harness.py')).read())\n",
              "hack", "hack.read_verifier"),
    "loop": ("    while True:\n        pass\n", "fail", "model.timeout"),
}


@pytest.mark.parametrize("name", ["local", "warm", "docker"])
async def test_verdicts_are_the_same_on_every_isolating_backend(request, built_envs, name):  # noqa: F811
    """Pass, wrong answer, early exit, reading the harness and a spin, judged inside real isolation."""
    if name == "docker":
        request.getfixturevalue("docker_engine")
    config = SandboxConfig(backend="local" if name == "warm" else name, warm_python=name == "warm",
                           docker_warm_pool=0)
    backend = await open_backend(config, slots=2, run_id=f"judge-test-{os.getpid()}")
    task = humaneval()["HumanEval/53"]
    try:
        quick = msgspec.structs.replace(task, limits=Limits(timeout_s=3))  # the spin ends sooner
        batch = [attempt(quick, code or task.verifier.reference, attempt_id=f"{k}.0") for k, (code, _, _) in CASES.items()]
        judged = await judge(backend, batch, concurrency=2)
    finally:
        with anyio.CancelScope(shield=True):
            await backend.aclose()
    for j, (key, (_, outcome, cause)) in zip(judged, CASES.items()):
        assert (j.judgement.outcome, j.judgement.cause) == (outcome, cause), (key, j.judgement.evidence)
        assert j.result.backend == ("local" if name == "warm" else name)
    assert judged[0].judgement.reward == 1.0
