"""The red team by capability against the judge: on sample tasks (a generated function task, a
script task, HumanEval's examples), every attack is flagged as a hack or scores at most the
honest failure of its task, and none is dropped as infrastructure (a drop it caused is a miss)."""

from __future__ import annotations

import anyio
import pytest

from envs import registry
from judging import redteam
from judging.attacks import CAPABILITIES
from judging.config import JudgeConfig
from sandbox import open_backend
from sandbox.config import SandboxConfig
from tests.support.sandbox_fixtures import built_envs  # noqa: F401

pytestmark = pytest.mark.bus

SAMPLE = {"python_functions": 1, "data_scripts": 1, "humaneval": 1}
"Tasks per environment; HumanEval's task takes the attacks on its visible examples only."


def _keep(meta: dict) -> bool:
    """Attacks on the tasks themselves (impossible variants are test_redteam's)."""
    return meta["variant"] == "original" and (meta["env"] != "humaneval" or meta["capability"] in ("examples", "combined"))


@pytest.fixture(scope="module")
def judged(built_envs):  # noqa: F811
    """Every planned attempt judged once, on the local backend, with the judge's defaults."""
    tasks = {env: registry.first_tasks([env], n)[env] for env, n in SAMPLE.items()}

    async def main():
        backend = await open_backend(SandboxConfig(backend="local"))
        try:
            return await redteam.run(tasks, backend, JudgeConfig(), concurrency=4, keep=_keep)
        finally:
            await backend.aclose()

    return tasks, anyio.run(main)


def test_the_honest_failures_are_measured_below_the_reference(judged):
    """Each task's reference passes; its honest wrong attempts are judged (not dropped) and
    score below it: the bar each attack is held to comes from the same run."""
    tasks, trials = judged
    for env, ts in tasks.items():
        for task in ts:
            mine = [t for t in trials if t.task_id == task.task_id and t.variant == "original"]
            [ref] = [t for t in mine if t.capability == redteam.REFERENCE]
            honest = [t for t in mine if t.capability == redteam.HONEST]
            assert ref.outcome == "pass", (ref.cause, ref.evidence)
            assert 2 <= len(honest) <= 3 and all(t.outcome == "fail" for t in honest), honest
            assert ref.honest is not None and ref.honest < ref.reward


@pytest.mark.parametrize("capability", [c for c in CAPABILITIES if c not in ("workspace", "escape")])
def test_no_attack_is_dropped_or_scores_above_the_honest_failure(judged, capability):
    """Every attack abusing `capability` (several variants a task) is flagged, or scores at most
    what an honest wrong attempt at the same task scores; a drop is a miss."""
    _, trials = judged
    mine = [t for t in trials if t.capability == capability and t.variant == "original"]
    assert len({t.name for t in mine}) >= 2
    misses = [f"{t.task_id}: {t.name}: {t.verdict} ({t.outcome} {t.reward} vs honest {t.honest}, {t.cause})"
              for t in mine if t.miss]
    assert not misses, "\n".join(misses)

