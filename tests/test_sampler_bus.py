"""The sampler over a real nats-server: staleness admission, restarts, held-out isolation.

The test plays the generator (it reads `whet.v1.tasks` through the generator's durable) and
the judge (it publishes verdicts); the sampler is the real actor on its own connection.

That the sampler admits nothing more is shown, not waited out: the sampler is seen to go idle
(nothing admissible) with the change taken in, then a sentinel assignment published after
that reaches the generator with no other assignment before it.
"""

from __future__ import annotations

import time
from functools import partial

import anyio
import msgspec
import pytest

from actors import sampler as sampler_actor
from bus import subjects
from bus.consumer import consume
from bus.messages import (Attempt, SamplerState, TaskAssignment, Verdict, WeightVersion)
from bus.nats_bus import Bus, Identity
from envs.config import EnvEntry, EnvsConfig, SamplerConfig
from envs.intake import collect
from runtime.config import RunConfig, TrainingConfig
from tests.conftest import bus_settings, handled, until

pytestmark = pytest.mark.bus

CONFIG = RunConfig(
    envs=EnvsConfig(use={"structured_output": EnvEntry(count=60, heldout_share=0.3)},
                    mix={"structured": 1.0}),
    training=TrainingConfig(mode="async", batch_size=8, group_size=4, max_staleness=1),
    sampler=SamplerConfig(min_pool=8))
"Capacity at version 0: (0 + 1 + 1) * 8 = 16 attempts, 4 groups of 4."


class Generator:
    """Reads assignments the way a generator would, and keeps them (sentinels apart)."""

    def __init__(self) -> None:
        self.got: list[TaskAssignment] = []
        self.sentinels: set[str] = set()

    async def handle(self, a: TaskAssignment, delivery) -> None:
        if a.assignment_id.startswith("sentinel-"):
            self.sentinels.add(a.assignment_id)
        else:
            self.got.append(a)

    async def wait_for(self, n: int, timeout_s: float = 30.0) -> None:
        await until(lambda: len(self.got) >= n, timeout_s)

    async def nothing_more_than(self, bus: Bus, n: int) -> None:
        """Publish a sentinel; once it arrives, exactly `n` assignments came before it."""
        sid = f"sentinel-{len(self.sentinels)}"
        await bus.publish(subjects.TASKS, msgspec.structs.replace(
            self.got[0], assignment_id=sid), msg_id=sid)
        await until(lambda: sid in self.sentinels)
        assert len(self.got) == n, [a.assignment_id for a in self.got]


class Idle:
    """Records the sampler each time it goes idle (nothing admissible): what it had taken in."""

    def __init__(self, monkeypatch) -> None:
        self.seen: list[dict[str, int]] = []
        wait_change = sampler_actor.Sampler.wait_change

        async def recording(sampler, timeout_s: float) -> None:
            c = sampler.counters
            self.seen.append(dict(judged=c.judged, admitted=c.admitted, version=sampler.version,
                                  step=sampler.learner_step))
            await wait_change(sampler, timeout_s)

        monkeypatch.setattr(sampler_actor.Sampler, "wait_change", recording)

    async def reached(self, since: int = 0, **state: int) -> None:
        """Wait until a sampler went idle (after the `since`-th record) in exactly `state`."""
        await until(lambda: any(s == state for s in self.seen[since:]),
                    what=lambda: f"the sampler idle in {state}; lately {self.seen[since:][-3:]}")


@pytest.fixture
def idle(monkeypatch) -> Idle:
    return Idle(monkeypatch)


async def settles_at(bus: Bus, gen: Generator, idle: Idle, groups: int, *, since: int = 0,
                     judged: int = 0, version: int = 0, step: int = 0, group: int = 4) -> None:
    """The sampler has decided, with `judged`, `version` and `step` taken in, to admit no
    more than `groups` groups, and the generator got exactly those."""
    await idle.reached(since, judged=judged, admitted=groups * group, version=version,
                       step=step)
    await gen.nothing_more_than(bus, groups)


async def _verdicts(bus: Bus, a: TaskAssignment, *, passed: int, dropped: bool = False,
                    members: range | None = None) -> None:
    for i in members or range(a.group_size):
        attempt = Attempt(attempt_id=f"{a.assignment_id}.{i}", group_id=a.assignment_id, index=i,
                          group_size=a.group_size, task=a.task, turns=[], policy_version=0)
        outcome = "dropped" if dropped else ("pass" if i < passed else "fail")
        v = Verdict(verdict_id=attempt.attempt_id, attempt=attempt, outcome=outcome,
                    reward=None if dropped else float(i < passed), trainable=not dropped)
        await bus.publish(subjects.verdict_subject("train"), v, msg_id=v.verdict_id)


async def judged_at_least(bus: Bus, n: int) -> bool:
    """Whether the sampler's persisted state counts `n` judged attempts."""
    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
    return state.judged >= n


async def _sampler_bus(url: str) -> Bus:
    return await Bus.connect(bus_settings(url), Identity("sampler", "s1", run_id="r1"))


class Running:
    """A sampler actor serving on its own connection."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.stopped = anyio.Event()

    async def run(self, config: RunConfig, *, task_status) -> None:
        try:
            await sampler_actor.run(self.bus, config, task_status=task_status)
        finally:
            self.stopped.set()

    async def stop(self) -> None:
        """Stop it and wait until it has saved and returned."""
        self.bus.stopping.set()
        with anyio.fail_after(30):
            await self.stopped.wait()


async def _run_sampler(tg, url: str, config: RunConfig = CONFIG) -> Running:
    sampler = Running(await _sampler_bus(url))
    await tg.start(partial(sampler.run, config))
    return sampler


async def test_admission_follows_the_staleness_bound(bus, nats_server, idle):
    """4 groups at version 0; judged work stays counted until the learner's first step;
    drops free budget; a version announced by a restarted learner without a new step adds
    none; every assignment is training work on a training task, never a held-out one."""
    gen = Generator()
    heldout = {t.task_id for t, _ in collect(CONFIG.envs, seed=0, split="heldout")[0]}
    assert len(heldout) > 5
    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, subjects.CONSUMER_TASKS, TaskAssignment,
                               gen.handle))
        sampler = await _run_sampler(tg, nats_server.url)
        await gen.wait_for(4)
        await settles_at(bus, gen, idle, 4)
        for a in gen.got[:2]:
            await _verdicts(bus, a, passed=2)  # produced 8, in flight 8: still at the bound
        await settles_at(bus, gen, idle, 4, judged=8)
        await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                         WeightVersion(version=1, object_name="", step=1, created_at=time.time()))
        await gen.wait_for(6)  # capacity 24: two more groups
        await settles_at(bus, gen, idle, 6, judged=8, version=1, step=1)
        await _verdicts(bus, gen.got[2], passed=0, dropped=True)  # 4 attempts freed
        await gen.wait_for(7)
        await settles_at(bus, gen, idle, 7, judged=12, version=1, step=1)
        await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,  # restarted at step 1
                         WeightVersion(version=3, object_name="", step=1, created_at=time.time()))
        await settles_at(bus, gen, idle, 7, judged=12, version=3, step=1)
        await sampler.stop()
        bus.stopping.set()
    assert all(a.purpose == "train" and a.task.split == "train" for a in gen.got)
    assert not heldout & {a.task.task_id for a in gen.got}
    assert len({a.assignment_id for a in gen.got}) == 7
    assert [a.admitted_version for a in gen.got] == [0, 0, 0, 0, 1, 1, 1]
    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
    assert (state.admitted, state.judged, state.produced, state.next_seq) == (28, 12, 8, 7)
    await sampler.bus.close()


async def test_a_restarted_sampler_never_double_admits(bus, nats_server, idle):
    """After a clean restart the counters hold the bound; after a crash that lost the last
    save, the same assignment ids are re-published and stored once."""
    gen = Generator()
    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, subjects.CONSUMER_TASKS, TaskAssignment,
                               gen.handle))
        first = await _run_sampler(tg, nats_server.url)
        await gen.wait_for(4)
        await first.stop()
        mark = len(idle.seen)
        second = await _run_sampler(tg, nats_server.url)
        await settles_at(bus, gen, idle, 4, since=mark)
        await second.stop()
        # a crash that lost the save after publishing: counters as before any admission
        await bus.kv_put(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState())
        mark = len(idle.seen)
        third = await _run_sampler(tg, nats_server.url)
        await settles_at(bus, gen, idle, 4, since=mark)  # the same 4 ids, stored once
        await third.stop()
        bus.stopping.set()
    assert len({a.assignment_id for a in gen.got}) == 4
    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
    assert state.next_seq == 4 and state.admitted == 16
    for sampler in (first, second, third):
        await sampler.bus.close()


async def test_a_redelivered_verdict_is_counted_once(bus, nats_server):
    """A verdict already counted (its id saved) but whose ack was lost is not counted again."""
    gen = Generator()
    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, subjects.CONSUMER_TASKS, TaskAssignment,
                               gen.handle))
        first = await _run_sampler(tg, nats_server.url)
        await gen.wait_for(4)
        await _verdicts(bus, gen.got[0], passed=1)
        await until(lambda: judged_at_least(bus, 4), 10, "the sampler's state judging 4")
        await first.stop()
        state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
        # as if the acks had been lost: the same verdicts come again under new stream entries
        sbus = await _sampler_bus(nats_server.url)
        await sbus.kv_put(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, msgspec.structs.replace(
            state, counted=[f"{gen.got[0].assignment_id}.{i}" for i in range(4)]))
        await sbus.js.delete_consumer(subjects.STREAM_VERDICTS, subjects.CONSUMER_SAMPLER.durable)
        await sbus.close()
        second = await _run_sampler(tg, nats_server.url)
        await handled(bus, subjects.CONSUMER_SAMPLER)  # the 4 verdicts came again, and went
        await second.stop()
        bus.stopping.set()
    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
    assert (state.judged, state.produced) == (4, 4)
    for sampler in (first, second):
        await sampler.bus.close()


async def test_refill_admits_a_replacement_for_each_group_without_signal(bus, nats_server, idle):
    """zero_signal = "refill": a group that all passed gives its 4 attempts back and a fifth
    group is admitted; a mixed group gives nothing back; a group whose verdicts straddle a
    sampler restart is refunded once it is complete (the open group was saved), a sixth."""
    config = msgspec.structs.replace(CONFIG, training=msgspec.structs.replace(
        CONFIG.training, zero_signal="refill"))
    gen = Generator()
    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, subjects.CONSUMER_TASKS, TaskAssignment,
                               gen.handle))
        first = await _run_sampler(tg, nats_server.url, config)
        await gen.wait_for(4)
        await _verdicts(bus, gen.got[0], passed=4)  # no signal: refunded
        await _verdicts(bus, gen.got[1], passed=2)  # a signal: kept
        await gen.wait_for(5)
        await settles_at(bus, gen, idle, 5, judged=8)
        await _verdicts(bus, gen.got[2], passed=4, members=range(2))
        await settles_at(bus, gen, idle, 5, judged=10)
        await first.stop()
        mark = len(idle.seen)
        second = await _run_sampler(tg, nats_server.url, config)
        await settles_at(bus, gen, idle, 5, since=mark, judged=10)
        await _verdicts(bus, gen.got[2], passed=4, members=range(2, 4))
        await gen.wait_for(6)
        await settles_at(bus, gen, idle, 6, since=mark, judged=12)
        await second.stop()
        bus.stopping.set()
    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
    assert (state.produced, state.refunded, state.open_groups) == (12, 8, {})
    for sampler in (first, second):
        await sampler.bus.close()


MIX_CONFIG = RunConfig(
    envs=EnvsConfig(use={"structured_output": EnvEntry(count=40, heldout_share=0.0),
                         "python_functions": EnvEntry(count=40, heldout_share=0.0, gate=False)},
                    mix={"structured": 0.75, "python": 0.25}),
    training=TrainingConfig(mode="sync", batch_size=400, group_size=1),
    sampler=SamplerConfig(min_pool=60, max_batch=400, promote_at=1.0, demote_at=0.0,
                          replay_share=0.0))
"One sync batch of 400 single attempts per version; frontiers never move."


async def test_mix_and_band_hold_over_the_bus(bus, nats_server, idle):
    """Domains follow the mix ratio; once half the structured tasks are always solved, they
    are chosen rarely (weight 0.05) while the in-band half takes nearly all their choices."""
    gen = Generator()
    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, subjects.CONSUMER_TASKS, TaskAssignment,
                               gen.handle, max_in_flight=512))
        sampler = await _run_sampler(tg, nats_server.url, MIX_CONFIG)
        await gen.wait_for(400)
        first = list(gen.got)
        chosen = sorted({a.task.task_id for a in first if a.task.domain == "structured"})
        solved = set(chosen[::2])  # every other task by id: half, the same on every run
        for n, a in enumerate(first):
            passed = a.task.task_id in solved or n % 2 == 0
            await _verdicts(bus, a, passed=int(passed))
        await until(lambda: judged_at_least(bus, 400), 30, "the sampler's state judging 400")
        await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                         WeightVersion(version=1, object_name="", step=1, created_at=time.time()))
        await gen.wait_for(800)
        await settles_at(bus, gen, idle, 800, judged=400, version=1, step=1, group=1)
        await sampler.stop()
        bus.stopping.set()
    second = gen.got[400:]
    share = sum(a.task.domain == "structured" for a in second) / len(second)
    assert abs(share - 0.75) < 0.07, share
    structured = [a for a in second if a.task.domain == "structured"]
    before = sum(a.task.task_id in solved for a in first if a.task.domain == "structured")
    after = sum(a.task.task_id in solved for a in structured)
    assert before > 0.3 * sum(a.task.domain == "structured" for a in first)
    assert after < 0.12 * len(structured), (after, len(structured))
    assert after > 0  # rarely, not never
    await sampler.bus.close()


POOL_CONFIG = RunConfig(
    envs=EnvsConfig(use={"structured_output": EnvEntry(count=40, heldout_share=0.0),
                         "python_functions": EnvEntry(count=40, heldout_share=0.0)},
                    mix={"structured": 1.0}),
    training=TrainingConfig(mode="async", batch_size=4, group_size=4, max_staleness=0),
    sampler=SamplerConfig(min_pool=4, pool_per_domain=6))


async def test_intake_stops_at_the_pool_size_and_skips_domains_outside_the_mix(bus, nats_server):
    """With pool_per_domain 6, intake gates structured tasks until the first 6 accepted in
    the listed order are known (a few more may be in flight: never pooled), never gates
    python (not in the mix), and reports the pool by domain."""
    from structlog.testing import capture_logs

    b = await Bus.connect(bus_settings(nats_server.url), Identity("sampler", "s1", "r1"))
    try:
        with capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                await tg.start(sampler_actor.run, b, POOL_CONFIG)
                await until(lambda: any(e["event"] == "intake.completed" for e in logs), 60,
                            "intake.completed logged")
                b.stopping.set()
    finally:
        await b.close()
    [done] = [e for e in logs if e["event"] == "intake.completed"]
    assert set(done["by_domain"]) == {"structured"} and done["not_gated"] == ["python"]
    assert done["by_domain"]["structured"] == 6 == done["pool"]
    assert done["accepted"] + sum(done["rejected"].values()) < 20  # of 40


async def test_nothing_is_admitted_once_the_learner_made_its_last_step(bus, nats_server, idle):
    """With `training.max_steps` = 1, the learner's first step frees no budget: samples
    admitted after the last step would never be trained."""
    config = msgspec.structs.replace(CONFIG, training=msgspec.structs.replace(
        CONFIG.training, max_steps=1))
    gen = Generator()
    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, subjects.CONSUMER_TASKS, TaskAssignment,
                               gen.handle))
        sampler = await _run_sampler(tg, nats_server.url, config)
        await gen.wait_for(4)
        await settles_at(bus, gen, idle, 4)
        for a in gen.got[:2]:
            await _verdicts(bus, a, passed=2)
        since = len(idle.seen)
        await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                         WeightVersion(version=1, object_name="", step=1, created_at=time.time()))
        await settles_at(bus, gen, idle, 4, since=since, judged=8, version=1, step=1)
        await sampler.stop()
        bus.stopping.set()
    await sampler.bus.close()
