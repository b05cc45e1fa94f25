"""The generator actor: policy samples for assignments and continuations.

Consumes `TaskAssignment`s (durable `generator` on whet.v1.tasks, `generator-rounds` on
whet.v1.rounds) and `Attempt`s to continue (`generator-turns` on whet.v1.turns); publishes
one `Attempt` per sample on whet.v1.attempts, msg id '<attempt_id>/t<turn>', so a redelivered
input never stores a second attempt. Follows the policy version (`policy.follower`): work runs
on weights at least as new as its `admitted_version`, a round's work on exactly its version
(a pinned copy where the engine `pins`, so training never waits for a round). Reports the
version it runs and its tokens/s in heartbeats.

It does not judge, execute or decide whether an attempt continues (the judge does), and it
does not choose what to sample (the sampler does).
"""

from __future__ import annotations

import os
import time
from functools import partial

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus

from bus import subjects
from bus.codec import pack_f32, pack_ids, unpack_ids
from bus.consumer import Delivery, consume
from bus.messages import Attempt, TaskAssignment, Turn
from bus.nats_bus import Bus
from judging.tools import is_tool_task
from policy.chat import ChatFormat
from policy.engine import Engine, RowSettings, Sample, SampleRequest, room_left
from policy.engines import open_engine
from policy.follower import WeightFollower
from runtime.config import RunConfig

log = structlog.get_logger("actors.generator")


def turn_msg_id(attempt: Attempt) -> str:
    """Message id of an attempt whose newest turn was just sampled."""
    return f"{attempt.attempt_id}/t{len(attempt.turns) - 1}"


def make_turn(prompt_ids: list[int], sample: Sample, instance: str) -> Turn:
    """The `Turn` recording one sample and the context ids added before it."""
    return Turn(prompt_ids=pack_ids(prompt_ids), completion_ids=pack_ids(sample.token_ids),
                logprobs=pack_f32(sample.logprobs), completion=sample.text,
                policy_version=sample.policy_version, generator=instance,
                finish_reason=sample.finish_reason)


def context_of(attempt: Attempt) -> list[int]:
    """Every token of an attempt so far: each turn's added context, then its completion."""
    ids: list[int] = []
    for turn in attempt.turns:
        ids.extend(unpack_ids(turn.prompt_ids).tolist())
        ids.extend(unpack_ids(turn.completion_ids).tolist())
    return ids


def next_context(attempt: Attempt, chat: ChatFormat) -> tuple[list[int], list[int]]:
    """(ids added before the next sample, the whole context): the stored tokens of every
    turn, then the last turn's feedback as a user turn (a tool message in a tool episode),
    the last completion's turn closed unless it closed itself. Nothing is re-tokenised."""
    last = attempt.turns[-1]
    closed = chat.closes(unpack_ids(last.completion_ids).tolist(), last.finish_reason)
    role = "tool" if is_tool_task(attempt.task) else "user"
    added = chat.feedback_ids(last.feedback, closed, role)
    return added, context_of(attempt) + added


class Generator:
    """Turns work items into attempts with one engine."""

    def __init__(self, bus: Bus, config, engine: Engine, follower: WeightFollower) -> None:
        self.bus, self.config, self.engine, self.follower = bus, config, engine, follower
        self.gen = config.generator
        self.max_context = config.model.max_context

    def _settings(self, purpose: str, context_len: int, version: int = -1) -> RowSettings:
        sampling = self.gen.eval_sampling if purpose == "eval" else self.gen.sampling
        pinned = version if purpose == "eval" and self.engine.pins else -1
        return RowSettings.of(sampling, room_left(context_len, self.max_context), pinned)

    async def on_assignment(self, work: TaskAssignment, delivery: Delivery) -> None:
        """Sample `group_size` attempts of the assignment's task, once the weights of its
        admitted version are here (at most `weights_wait_s`), and publish them on `ATTEMPTS`."""
        if work.group_size < 1:  # retried, then dead-lettered with this reason
            raise ValueError(f"assignment {work.assignment_id}: group_size {work.group_size} < 1")
        began = time.monotonic()
        if work.purpose == "eval" and self.engine.pins:
            await self.follower.pin_round(work.admitted_version, self.gen.eval_sampling.dtype,
                                          self.gen.weights_wait_s)
        else:
            await self.follower.wait_for(work.admitted_version, self.gen.weights_wait_s)
        self._cores_when_trained()
        prompt = self.engine.chat.prompt_ids(work.task.prompt)
        samples = await self.engine.generate(
            SampleRequest(prompt, work.group_size,
                          self._settings(work.purpose, len(prompt), work.admitted_version)))
        instance = self.bus.identity.instance
        attempts = [
            Attempt(attempt_id=f"{work.assignment_id}.{i}", group_id=work.assignment_id,
                    index=i, group_size=work.group_size, task=work.task,
                    turns=[make_turn(prompt, s, instance)], policy_version=s.policy_version,
                    admitted_version=work.admitted_version, purpose=work.purpose)
            for i, s in enumerate(samples)]
        await self.bus.publish_many(subjects.ATTEMPTS, [(turn_msg_id(a), a) for a in attempts])
        self._report()
        log.info("generator.assignment_completed", assignment_id=work.assignment_id,
                 attempts=len(attempts), policy_version=samples[0].policy_version,
                 tokens=sum(len(s.token_ids) for s in samples),
                 seconds=round(time.monotonic() - began, 3))

    async def on_continuation(self, attempt: Attempt, delivery: Delivery) -> None:
        """Sample the next turn of an attempt whose last turn carries feedback (a user or, in a
        tool episode, a tool message) and publish it; its `policy_version` is its oldest turn's."""
        if not attempt.turns or not attempt.turns[-1].feedback:
            raise ValueError(f"continuation {attempt.attempt_id}: its last turn has no feedback")
        added, context = next_context(attempt, self.engine.chat)
        if attempt.purpose == "eval" and self.engine.pins:
            await self.follower.pin_round(attempt.admitted_version,
                                          self.gen.eval_sampling.dtype, self.gen.weights_wait_s)
        [sample] = await self.engine.generate(SampleRequest(
            context, 1, self._settings(attempt.purpose, len(context), attempt.admitted_version)))
        turns = [*attempt.turns, make_turn(added, sample, self.bus.identity.instance)]
        follow = msgspec.structs.replace(attempt, turns=turns,
                                         policy_version=min(t.policy_version for t in turns))
        await self.bus.publish(subjects.ATTEMPTS, follow, msg_id=turn_msg_id(follow))
        self._report()
        log.info("generator.turn_completed", attempt_id=attempt.attempt_id, turn=len(turns) - 1,
                 policy_version=sample.policy_version, tokens=len(sample.token_ids))

    def _cores_when_trained(self) -> None:
        """Once the learner has published its last step (`training.max_steps`), nothing else
        needs the cores: the final round's batches use all this process may run on."""
        last, most = self.follower.announced, self.config.training.max_steps
        if most and last is not None and last.step >= most and not self.engine.threads:
            self.engine.threads = len(os.sched_getaffinity(0))
            log.info("generator.threads_raised", threads=self.engine.threads,
                     reason=f"the learner published step {last.step} of {most}")

    def _report(self) -> None:
        self.bus.stats.policy_version = self.engine.version
        self.bus.stats.gauges.update(self.engine.stats)


async def run(bus: Bus, config: RunConfig, *,
              task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve assignments and continuations until `bus.stopping` is set."""
    engine = await anyio.to_thread.run_sync(open_engine, config.generator, config.model,
                                            config.run.draw_seed + _instance_salt(bus),
                                            config.learner.lora)
    follower = WeightFollower(bus, engine)
    generator = Generator(bus, config, engine, follower)
    async with anyio.create_task_group() as tg:
        await tg.start(engine.serve)
        await tg.start(follower.run)
        limit = config.generator.max_in_flight
        drain = config.supervisor.drain_s
        async with anyio.create_task_group() as work:
            await work.start(partial(consume, bus, subjects.CONSUMER_TASKS, TaskAssignment,
                                     generator.on_assignment, max_in_flight=limit,
                                     drain_s=drain))
            # A round's rows share batches with training work instead of queueing ahead of it:
            # at most a batch of them is held at a time.
            await work.start(partial(consume, bus, subjects.CONSUMER_ROUNDS, TaskAssignment,
                                     generator.on_assignment,
                                     max_in_flight=max(1, config.generator.max_batch // 2),
                                     drain_s=drain))
            await work.start(partial(consume, bus, subjects.CONSUMER_TURNS, Attempt,
                                     generator.on_continuation, max_in_flight=limit,
                                     drain_s=drain))
            task_status.started()
        tg.cancel_scope.cancel()


def _instance_salt(bus: Bus) -> int:
    # Generators of one run must not draw identical samples from one seed.
    return sum(ord(c) * 31 ** i for i, c in enumerate(bus.identity.instance)) % 1_000_003
