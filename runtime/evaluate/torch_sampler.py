"""Held-out attempts from a model folder (or the configured model) through the torch engine.

Consumes a `ModelConfig` (the configured one, or `path=` a Hugging Face folder), the run
config's `[generator]` (device, dtype, `eval_sampling`, `max_in_flight`) and the tasks;
produces one eval `Attempt` per task, sampled as a generator samples a held-out round: the
prompt through the model's chat template, `[generator.eval_sampling]` (greedy by default), at
most `max_in_flight` prompts at a time; tool tasks as episodes (`episodes`). It loads the
weights once per kind of task and holds no bus.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from actors.generator import make_turn
from bus.messages import Attempt, Task
from envs.evaluation import round_assignment_id
from policy.config import ModelConfig
from policy.engine import RowSettings, SampleRequest, room_left
from runtime.config import RunConfig
from runtime.evaluate.episodes import Episode, run_episodes


@dataclass(frozen=True)
class TorchSampler:
    """Held-out attempts from `model` on the torch engine."""

    model: ModelConfig

    def describe(self) -> dict[str, str]:
        """What was evaluated, for the record."""
        return {"kind": "folder", "path": self.model.path} if self.model.path \
            else {"kind": "configured", "name": self.model.name}

    async def sample(self, cfg: RunConfig, tasks: list[Task], label: str) -> list[Attempt]:
        """One eval attempt per task, in task order."""
        from policy.torch_engine import TorchEngine

        engine = await anyio.to_thread.run_sync(TorchEngine, cfg.generator, self.model, cfg.run.seed)
        attempts: list[Attempt | None] = [None] * len(tasks)
        holding = anyio.Semaphore(cfg.generator.max_in_flight)

        async def one(i: int, task: Task) -> None:
            async with holding:
                prompt = engine.chat.prompt_ids(task.prompt)
                settings = RowSettings.of(cfg.generator.eval_sampling,
                                          room_left(len(prompt), self.model.max_context))
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

    async def episodes(self, cfg: RunConfig, tasks: list[Task], label: str,
                       max_turns: int) -> list[Episode]:
        """One tool episode per task, their turns sampled in batches (`run_episodes`)."""
        from policy.torch_engine import TorchEngine

        engine = await anyio.to_thread.run_sync(TorchEngine, cfg.generator, self.model, cfg.run.seed)
        return await run_episodes(cfg, engine, tasks, label, max_turns)
