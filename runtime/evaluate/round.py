"""One held-out round outside a stack: the evaluator's tasks, a sampler's attempts, judged.

Consumes a run config (`[envs]` and `[evaluator]` for the task choice, `[executor.sandbox]`
and `[judge]` for judging, `[envs] mix` for trained and transfer domains), a sampler (a model
through the torch engine, `torch_sampler`, or an endpoint, `endpoint`) and the tasks;
produces each task's `TaskResult` and the round's `EvalRound`, counted by
`envs.evaluation.Round` as the evaluator counts its verdicts (a dropped attempt is no
evidence) and paired with a baseline's results when one is given. Judging is
`judging.offline.judge_all`, the judge's own code path. `evaluate` is the short form
`bench/vs_trl` calls. It trains nothing and publishes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Callable, Protocol

import anyio
import msgspec

from bus.errors import RunError
from bus.messages import Attempt, EvalPoint, EvalRound, Task
from envs.evaluation import Round, point_of
from envs.intake import KvGateCache, gated_heldout
from envs.strata import rung_of
from judging.offline import judge_all
from policy.config import ModelConfig
from runtime.config import RunConfig
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


class Sampler(Protocol):
    """Where attempts come from: a model folder or an endpoint."""

    def describe(self) -> dict[str, str]:
        """What was evaluated, for the record."""

    async def sample(self, cfg: RunConfig, tasks: list[Task], label: str) -> list[Attempt]:
        """One eval attempt per task."""


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


async def judge(cfg: RunConfig, attempts: list[Attempt]) -> dict[str, TaskResult]:
    """Each attempt judged on `[executor.sandbox]`, by task id."""
    try:
        backend = await open_backend(cfg.executor.sandbox, cfg.executor.concurrency)
    except (RuntimeError, OSError) as exc:
        raise RunError(f"the {cfg.executor.sandbox.backend} sandbox cannot start: {exc}") from None
    try:
        judged = await judge_all(attempts, backend, cfg.judge, concurrency=cfg.executor.concurrency)
    finally:
        with anyio.CancelScope(shield=True):
            await backend.aclose()
    return {j.attempt.task.task_id: TaskResult(domain=j.attempt.task.domain,
                                               outcome=j.judgement.outcome,
                                               reward=j.judgement.reward,
                                               rung=rung_of(j.attempt.task)) for j in judged}


async def run_round(cfg: RunConfig, sampler: Sampler, tasks: list[Task],
                    label: str) -> dict[str, TaskResult]:
    """`sampler`'s attempts at `tasks`, judged, by task id."""
    return await judge(cfg, await sampler.sample(cfg, tasks, label))


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
