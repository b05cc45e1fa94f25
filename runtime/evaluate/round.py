"""One held-out round outside a stack: the evaluator's tasks, a sampler's attempts, judged.

Consumes a run config (`[envs]` and `[evaluator]` for the task choice, `[executor.sandbox]`
and `[judge]` for judging, `[envs] mix` for trained and transfer domains), a sampler (a model
through the torch engine, `torch_sampler`, or an endpoint, `endpoint`) and the tasks;
produces each task's `TaskResult` (a tool task's with its episode's turns, well-formed
calls, calls by tool and end) and the round's `EvalRound`, counted by
`envs.evaluation.Round` as the evaluator counts its verdicts (a dropped attempt is no
evidence) and paired with a baseline's results when one is given. Judging is
`judging.offline.judge_all`, the judge's own code path. `evaluate` is the short form
`bench/vs_trl` calls. It trains nothing and publishes nothing.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from typing import Callable, Protocol

import anyio
import msgspec

from bus.errors import RunError
from bus.messages import Attempt, EvalPoint, EvalRound, Task
from envs.evaluation import Round, point_of
from envs.intake import KvGateCache, gated_heldout
from envs.strata import rung_of
from judging.offline import Judged, judge_all
from judging.tools import is_tool_task
from policy.config import ModelConfig
from runtime.config import RunConfig
from runtime.evaluate.episodes import Episode
from runtime.evaluate.torch_sampler import TorchSampler
from sandbox import open_backend


class TaskResult(msgspec.Struct, kw_only=True):
    """One task's judged attempt."""

    domain: str
    outcome: str
    "The judge's outcome: 'pass', 'fail', or 'dropped' (infrastructure, no evidence)."
    reward: float | None
    "The judge's reward (None when dropped)."
    rung: int = 0
    "The task's rung (`envs.strata.rung_of`), for results per rung."
    turns: int = 0
    "Tool episodes: the turns sampled."
    well_formed: int = 0
    "Tool episodes: turns whose completion parsed as a tool call."
    tools: dict[str, int] = {}
    "Tool episodes: well-formed calls by tool."
    end: str = ""
    "Tool episodes: how the episode ended (`runtime.evaluate.episodes.Episode.end`)."


class Sampler(Protocol):
    """Where attempts come from: a model folder or an endpoint."""

    def describe(self) -> dict[str, str]:
        """What was evaluated, for the record."""

    async def sample(self, cfg: RunConfig, tasks: list[Task], label: str) -> list[Attempt]:
        """One eval attempt per task."""

    async def episodes(self, cfg: RunConfig, tasks: list[Task], label: str,
                       max_turns: int) -> list[Episode]:
        """One tool episode per tool task (`EndpointError` where the sampler has none)."""


async def heldout_tasks(cfg: RunConfig,
                        on_cpu: Callable[[float], None] = lambda seconds: None,
                        ) -> dict[str, list[Task]]:
    """The tasks an in-stack round of `cfg` evaluates, by domain: the evaluator's own choice
    (`envs.intake.gated_heldout` with `[evaluator]` tasks_per_domain, domain_tasks and split),
    gate reports kept on this machine's disk as the stack keeps them; `on_cpu` is told the
    sandboxed gate runs' CPU seconds so far."""
    ev = cfg.evaluator
    return await gated_heldout(cfg.envs, seed=cfg.run.seed, per_domain=ev.tasks_per_domain,
                               split=ev.split, domain_tasks=ev.domain_tasks, on_cpu=on_cpu,
                               cache=KvGateCache(None, cfg.envs.gates.keep_reports))


async def judged(cfg: RunConfig, attempts: list[Attempt]) -> list[Judged]:
    """Each attempt judged on `[executor.sandbox]`, in order."""
    if not attempts:
        return []
    try:
        backend = await open_backend(cfg.executor.sandbox, cfg.executor.concurrency)
    except (RuntimeError, OSError) as exc:
        raise RunError(f"the {cfg.executor.sandbox.backend} sandbox cannot start: {exc}") from None
    try:
        return await judge_all(attempts, backend, cfg.judge, concurrency=cfg.executor.concurrency)
    finally:
        with anyio.CancelScope(shield=True):
            await backend.aclose()


async def judge(cfg: RunConfig, attempts: list[Attempt]) -> dict[str, TaskResult]:
    """Each attempt judged on `[executor.sandbox]`, by task id."""
    return {j.attempt.task.task_id: TaskResult(domain=j.attempt.task.domain,
                                               outcome=j.judgement.outcome,
                                               reward=j.judgement.reward,
                                               rung=rung_of(j.attempt.task))
            for j in await judged(cfg, attempts)}


def episode_figures(episode: Episode) -> dict:
    """A tool episode's `TaskResult` fields: turns, well-formed turns, calls by tool, its end."""
    calls = [c.name for c in episode.attempt.tool_calls if c.name]
    return dict(turns=len(episode.attempt.turns), well_formed=len(calls),
                tools=dict(sorted(Counter(calls).items())), end=episode.end)


async def judge_episodes(cfg: RunConfig, episodes: list[Episode]) -> dict[str, TaskResult]:
    """Each episode's final workspace judged as the judge actor judges it, by task id; an
    episode the sandbox failed is dropped (no evidence), as the judge drops it."""
    played = [e for e in episodes if e.end != "infra"]
    results = {e.attempt.task.task_id: TaskResult(
        domain=e.attempt.task.domain, outcome="dropped", reward=None,
        rung=rung_of(e.attempt.task), **episode_figures(e)) for e in episodes if e.end == "infra"}
    for e, j in zip(played, await judged(cfg, [e.attempt for e in played])):
        results[e.attempt.task.task_id] = TaskResult(
            domain=e.attempt.task.domain, outcome=j.judgement.outcome, reward=j.judgement.reward,
            rung=rung_of(e.attempt.task), **episode_figures(e))
    return results


async def run_round(cfg: RunConfig, sampler: Sampler, tasks: list[Task], label: str,
                    max_turns: int = 1 << 30) -> dict[str, TaskResult]:
    """`sampler`'s attempts at `tasks`, judged, by task id: one reply per single-turn task,
    one episode (at most `max_turns` turns, within its budgets) per tool task."""
    single = [t for t in tasks if not is_tool_task(t)]
    episodic = [t for t in tasks if is_tool_task(t)]
    results = await judge(cfg, await sampler.sample(cfg, single, label)) if single else {}
    if episodic:
        results.update(await judge_episodes(
            cfg, await sampler.episodes(cfg, episodic, label, max_turns)))
    return results


def tally(cfg: RunConfig, results: Mapping[str, TaskResult],
          baseline: Mapping[str, TaskResult] | None = None) -> EvalRound:
    """The round's result as the evaluator reports it: pass@1 with its 95% interval and mean
    reward, overall, on trained and transfer domains and by domain, each paired with
    `baseline` (no pairs without one)."""
    def counted(found: Mapping[str, TaskResult]) -> Round:
        rnd = Round(0, len(found), 0.0)
        for task_id, r in sorted(found.items()):
            rnd.add(task_id, 0, task_id, r.domain, r.outcome, r.reward, rung=r.rung)
        return rnd

    before = counted(baseline).outcomes(0) if baseline else {}
    return counted(results).result(
        0, trained={d for d, w in cfg.envs.mix.items() if w > 0}, baseline=before,
        baseline_version=0 if baseline else -1, samples_per_task=1, train_reward=None,
        now=time.time(), split=cfg.evaluator.split)


async def evaluate(cfg: RunConfig, model: ModelConfig, tasks: list[Task],
                   label: str) -> tuple[EvalPoint, dict[str, tuple[float | None, str]]]:
    """`model` on `tasks` through the torch engine: the round's evaluation point and each
    task's (reward, outcome)."""
    results = await run_round(cfg, TorchSampler(model), tasks, label)
    return point_of(tally(cfg, results)), {t: (r.reward, r.outcome) for t, r in results.items()}
