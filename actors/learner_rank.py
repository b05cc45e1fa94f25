"""A learner rank other than 0, as a process of its own (`[learner] ranks = "bus"`).

Consumes the rendezvous rank 0 publishes in KV (`policy.rendezvous`) and the operations rank
0 broadcasts (`policy.ranks.follow`), which it runs on its own DeepSpeed `Trainer`, writing
its own checkpoint folder (`<checkpoint_dir>/rank-<k>`). Its rank is the number its instance
name ends in: `learner_rank-1` is rank 1 (`whet up` names instances so; under compose, pass
`--instance learner_rank-1`). Publishes its claim on a generation (`learner.rank.<k>`) and
its heartbeats. When rank 0 stops the group, it waits for the next generation; when rank 0
is lost (a collective fails) or publishes a newer generation, it exits with the error, and
its supervisor starts it again.

It consumes no verdicts, decides nothing about training and publishes no weights.
"""

from __future__ import annotations

import os
import re
import uuid

import anyio
import structlog
from anyio.abc import TaskStatus

from actors.learner_files import checkpoint_dir
from bus.errors import ConfigError
from bus.nats_bus import Bus
from policy.config import LearnerConfig
from policy.ranks import follow, in_daemon_thread
from policy.rendezvous import Meeting, take_seat, watch_generation
from policy.deepspeed_setup import import_engine
from policy.trainer import Trainer
from runtime.config import RunConfig

log = structlog.get_logger("actors.learner_rank")


def rank_of(instance: str, lc: LearnerConfig) -> int:
    """The rank an instance name gives (`learner_rank-2` is rank 2), checked against the config."""
    match = re.search(r"-(\d+)$", instance)
    rank = int(match[1]) if match else 0
    if lc.ranks != "bus":
        raise ConfigError("learner", "ranks", "a learner_rank actor needs [learner] ranks = "
                          f"\"bus\" (it is {lc.ranks!r}: rank 0 starts its own children)")
    if not 0 < rank < lc.world_size:
        raise ConfigError("actors", instance, f"a learner_rank instance is named "
                          f"learner_rank-<rank>, rank 1 to {lc.world_size - 1} "
                          f"([learner] world_size = {lc.world_size})")
    return rank


async def _seat_unless_stopping(bus: Bus, lc: LearnerConfig, rank: int,
                                incarnation: str) -> Meeting | None:
    meeting = None
    async with anyio.create_task_group() as tg:
        async def stop_waiting() -> None:
            await bus.stopping.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(stop_waiting)
        meeting = await take_seat(bus, lc, rank, incarnation)
        tg.cancel_scope.cancel()
    return meeting


async def run(bus: Bus, config: RunConfig, *,
              task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve as one rank, generation after generation, until stopped or lost."""
    lc = config.learner
    rank = rank_of(bus.identity.instance, lc)
    directory = checkpoint_dir(config, bus) / f"rank-{rank}"
    incarnation = uuid.uuid4().hex[:12]
    task_status.started()  # waiting for rank 0 is this actor's work
    async with anyio.create_task_group() as tg:  # import DeepSpeed while rank 0 starts
        tg.start_soon(anyio.to_thread.run_sync, import_engine, lc.device)
        meeting = await _seat_unless_stopping(bus, lc, rank, incarnation)
    while meeting is not None:
        os.environ.update(meeting.env())
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_generation, bus, meeting)
            await in_daemon_thread(follow, Trainer(config.trainer, directory), meeting.join)
            tg.cancel_scope.cancel()
        log.info("learner.rank_released", rank=rank, generation=meeting.generation)
        meeting = None if bus.stopping.is_set() else await _seat_unless_stopping(
            bus, lc, rank, incarnation)
