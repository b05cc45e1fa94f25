"""One held-out round outside a stack: a policy's greedy attempts at fixed held-out tasks, judged.

Consumes a run config (its generator, eval sampling, executor sandbox, judge and model
context), a model (a `ModelConfig`: the configured one, or `path=` a folder another trainer
saved) and the held-out tasks (`envs.intake.gated_heldout`, the evaluator's choice);
produces the round's `EvalPoint` (pass rate and mean reward by domain, as the evaluator
reports them, through `envs.evaluation.Round`) and each task's (reward, outcome).

The path is the stack's, without the bus: the torch engine samples with
`[generator.eval_sampling]` (greedy), at most `[generator] max_in_flight` prompts at a time
as a generator holds them; `judging.offline.judge_all` judges on `[executor.sandbox]`. It
trains nothing and publishes nothing.
"""

from __future__ import annotations

import time

import anyio

from actors.generator import make_turn
from bus.messages import Attempt, EvalPoint, Task
from envs.evaluation import Round, point_of, round_assignment_id
from envs.strata import rung_of
from judging.offline import judge_all
from policy.config import ModelConfig
from policy.engine import RowSettings, SampleRequest, room_left
from sandbox import open_backend


async def sample_round(cfg, model: ModelConfig, tasks: list[Task], label: str) -> list[Attempt]:
    """One greedy eval attempt per task from `model`."""
    from policy.torch_engine import TorchEngine

    engine = await anyio.to_thread.run_sync(TorchEngine, cfg.generator, model, cfg.run.seed)
    attempts: list[Attempt | None] = [None] * len(tasks)
    holding = anyio.Semaphore(cfg.generator.max_in_flight)

    async def one(i: int, task: Task) -> None:
        async with holding:
            prompt = engine.chat.prompt_ids(task.prompt)
            settings = RowSettings.of(cfg.generator.eval_sampling,
                                      room_left(len(prompt), cfg.model.max_context))
            [sample] = await engine.generate(SampleRequest(prompt, 1, settings))
        group = round_assignment_id(label, 0, i)
        attempts[i] = Attempt(attempt_id=f"{group}.0", group_id=group, index=0, group_size=1,
                              task=task, turns=[make_turn(prompt, sample, label)],
                              policy_version=0, purpose="eval")

    async with anyio.create_task_group() as tg:
        await tg.start(engine.serve)
        async with anyio.create_task_group() as work:
            for i, task in enumerate(tasks):
                work.start_soon(one, i, task)
        tg.cancel_scope.cancel()
    return [a for a in attempts if a is not None]


async def evaluate(cfg, model: ModelConfig, tasks: list[Task],
                   label: str) -> tuple[EvalPoint, dict[str, tuple[float | None, str]]]:
    """The round's evaluation point and each task's (reward, outcome)."""
    attempts = await sample_round(cfg, model, tasks, label)
    backend = await open_backend(cfg.executor.sandbox, cfg.executor.concurrency)
    try:
        judged = await judge_all(attempts, backend, cfg.judge, concurrency=cfg.executor.concurrency)
    finally:
        with anyio.CancelScope(shield=True):
            await backend.aclose()
    rnd = Round(0, len(judged), 0.0)
    for j in judged:
        rnd.add(j.attempt.attempt_id, 0, j.attempt.task.task_id, j.attempt.task.domain,
                j.judgement.outcome, j.judgement.reward, rung=rung_of(j.attempt.task))
    result = rnd.result(0, trained=set(cfg.envs.mix), baseline={}, baseline_version=0,
                        samples_per_task=1, train_reward=None, now=time.time())
    point = point_of(result)
    return point, {j.attempt.task.task_id: (j.judgement.reward, j.judgement.outcome) for j in judged}
