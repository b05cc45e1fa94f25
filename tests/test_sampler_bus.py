"""The sampler over a real nats-server: staleness admission, restarts, held-out isolation.

The test plays the generator (it reads `whet.v1.tasks` through the generator's durable) and
the judge (it publishes verdicts); the sampler is the real actor on its own connection.
"""

from __future__ import annotations

import time

import anyio
import msgspec

from actors import sampler as sampler_actor
from bus import subjects
from bus.consumer import consume
from bus.messages import (Attempt, SamplerState, TaskAssignment, Verdict, WeightVersion)
from bus.nats_bus import Bus, Identity
from envs.config import EnvEntry, EnvsConfig, SamplerConfig
from envs.intake import collect
from runtime.config import RunConfig, TrainingConfig
from tests.conftest import bus_settings

CONFIG = RunConfig(
    envs=EnvsConfig(use={"structured_output": EnvEntry(count=60, heldout_share=0.3)},
                    mix={"structured": 1.0}),
    training=TrainingConfig(mode="async", batch_size=8, group_size=4, max_staleness=1),
    sampler=SamplerConfig(min_pool=8))
"Capacity at version 0: (0 + 1 + 1) * 8 = 16 attempts, 4 groups of 4."


class Generator:
    """Reads assignments the way a generator would, and keeps them."""

    def __init__(self) -> None:
        self.got: list[TaskAssignment] = []

    async def handle(self, a: TaskAssignment, delivery) -> None:
        self.got.append(a)

    async def wait_for(self, n: int, timeout_s: float = 30.0) -> None:
        with anyio.fail_after(timeout_s):
            while len(self.got) < n:
                await anyio.sleep(0.05)

    async def stays_at(self, n: int, seconds: float = 1.5) -> None:
        await anyio.sleep(seconds)
        assert len(self.got) == n, [a.assignment_id for a in self.got]


async def _verdicts(bus: Bus, a: TaskAssignment, *, passed: int, dropped: bool = False) -> None:
    for i in range(a.group_size):
        attempt = Attempt(attempt_id=f"{a.assignment_id}.{i}", group_id=a.assignment_id, index=i,
                          group_size=a.group_size, task=a.task, turns=[], policy_version=0)
        outcome = "dropped" if dropped else ("pass" if i < passed else "fail")
        v = Verdict(verdict_id=attempt.attempt_id, attempt=attempt, outcome=outcome,
                    reward=None if dropped else float(i < passed), trainable=not dropped)
        await bus.publish(subjects.verdict_subject("train"), v, msg_id=v.verdict_id)


async def _sampler_bus(url: str) -> Bus:
    return await Bus.connect(bus_settings(url), Identity("sampler", "s1", run_id="r1"))


async def _run_sampler(tg, url: str) -> Bus:
    b = await _sampler_bus(url)
    await tg.start(sampler_actor.run, b, CONFIG)
    return b


async def _stop(b: Bus) -> None:
    b.stopping.set()


async def test_admission_follows_the_staleness_bound(bus, nats_server):
    """4 groups at version 0; judged work stays counted until the learner's first step;
    drops free budget; a version announced by a restarted learner without a new step adds
    none; every assignment is training work on a training task, never a held-out one."""
    gen = Generator()
    heldout = {t.task_id for t, _ in collect(CONFIG.envs, seed=0, split="heldout")[0]}
    assert len(heldout) > 5
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: consume(bus, subjects.CONSUMER_TASKS, TaskAssignment, gen.handle))
        sbus = await _run_sampler(tg, nats_server.url)
        await gen.wait_for(4)
        await gen.stays_at(4)
        for a in gen.got[:2]:
            await _verdicts(bus, a, passed=2)  # produced 8, in flight 8: still at the bound
        await gen.stays_at(4)
        await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                         WeightVersion(version=1, object_name="", step=1, created_at=time.time()))
        await gen.wait_for(6)  # capacity 24: two more groups
        await gen.stays_at(6)
        await _verdicts(bus, gen.got[2], passed=0, dropped=True)  # 4 attempts freed
        await gen.wait_for(7)
        await gen.stays_at(7)
        await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,  # restarted at step 1
                         WeightVersion(version=3, object_name="", step=1, created_at=time.time()))
        await gen.stays_at(7)
        await _stop(sbus)
        bus.stopping.set()
    assert all(a.purpose == "train" and a.task.split == "train" for a in gen.got)
    assert not heldout & {a.task.task_id for a in gen.got}
    assert len({a.assignment_id for a in gen.got}) == 7
    assert [a.admitted_version for a in gen.got] == [0, 0, 0, 0, 1, 1, 1]
    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
    assert (state.admitted, state.judged, state.produced, state.next_seq) == (28, 12, 8, 7)
    await sbus.close()


async def test_a_restarted_sampler_never_double_admits(bus, nats_server):
    """After a clean restart the counters hold the bound; after a crash that lost the last
    save, the same assignment ids are re-published and stored once."""
    gen = Generator()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: consume(bus, subjects.CONSUMER_TASKS, TaskAssignment, gen.handle))
        first = await _run_sampler(tg, nats_server.url)
        await gen.wait_for(4)
        await _stop(first)
        await anyio.sleep(1.0)
        second = await _run_sampler(tg, nats_server.url)
        await gen.stays_at(4)
        await _stop(second)
        await anyio.sleep(1.0)
        # a crash that lost the save after publishing: counters as before any admission
        await bus.kv_put(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState())
        third = await _run_sampler(tg, nats_server.url)
        await gen.stays_at(4, seconds=2.5)
        await _stop(third)
        bus.stopping.set()
    assert len({a.assignment_id for a in gen.got}) == 4
    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
    assert state.next_seq == 4 and state.admitted == 16
    for b in (first, second, third):
        await b.close()


async def test_a_redelivered_verdict_is_counted_once(bus, nats_server):
    """A verdict already counted (its id saved) but whose ack was lost is not counted again."""
    gen = Generator()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: consume(bus, subjects.CONSUMER_TASKS, TaskAssignment, gen.handle))
        first = await _run_sampler(tg, nats_server.url)
        await gen.wait_for(4)
        await _verdicts(bus, gen.got[0], passed=1)
        with anyio.fail_after(10):
            while (await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE,
                                    SamplerState)).judged < 4:
                await anyio.sleep(0.1)
        await _stop(first)
        await anyio.sleep(1.0)
        state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
        # as if the acks had been lost: the same verdicts come again under new stream entries
        sbus = await _sampler_bus(nats_server.url)
        await sbus.kv_put(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, msgspec.structs.replace(
            state, counted=[f"{gen.got[0].assignment_id}.{i}" for i in range(4)]))
        await sbus.js.delete_consumer(subjects.STREAM_VERDICTS, subjects.CONSUMER_SAMPLER.durable)
        await sbus.close()
        second = await _run_sampler(tg, nats_server.url)
        await anyio.sleep(2.0)
        await _stop(second)
        bus.stopping.set()
    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
    assert (state.judged, state.produced) == (4, 4)
    for b in (first, second):
        await b.close()


MIX_CONFIG = RunConfig(
    envs=EnvsConfig(use={"structured_output": EnvEntry(count=40, heldout_share=0.0),
                         "python_functions": EnvEntry(count=40, heldout_share=0.0, gate=False)},
                    mix={"structured": 0.75, "python": 0.25}),
    training=TrainingConfig(mode="sync", batch_size=400, group_size=1),
    sampler=SamplerConfig(min_pool=60, max_batch=400, promote_at=1.0, demote_at=0.0,
                          replay_share=0.0))
"One sync batch of 400 single attempts per version; frontiers never move."


async def test_mix_and_band_hold_over_the_bus(bus, nats_server):
    """Domains follow the mix ratio; once half the structured tasks are always solved, they
    are chosen rarely (weight 0.05) while the in-band half takes nearly all their choices."""
    gen = Generator()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: consume(bus, subjects.CONSUMER_TASKS, TaskAssignment, gen.handle,
                                      max_in_flight=512))
        b = await Bus.connect(bus_settings(nats_server.url), Identity("sampler", "s1", "r1"))
        await tg.start(sampler_actor.run, b, MIX_CONFIG)
        await gen.wait_for(400)
        first = list(gen.got)
        chosen = sorted({a.task.task_id for a in first if a.task.domain == "structured"})
        solved = set(chosen[::2])  # every other task by id: half, the same on every run
        for n, a in enumerate(first):
            passed = a.task.task_id in solved or n % 2 == 0
            await _verdicts(bus, a, passed=int(passed))
        with anyio.fail_after(30):
            while (await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE,
                                    SamplerState)).judged < 400:
                await anyio.sleep(0.1)
        await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                         WeightVersion(version=1, object_name="", step=1, created_at=time.time()))
        await gen.wait_for(800)
        await gen.stays_at(800, seconds=1.0)
        b.stopping.set()
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
    await b.close()


POOL_CONFIG = RunConfig(
    envs=EnvsConfig(use={"structured_output": EnvEntry(count=40, heldout_share=0.0),
                         "python_functions": EnvEntry(count=40, heldout_share=0.0)},
                    mix={"structured": 1.0}),
    training=TrainingConfig(mode="async", batch_size=4, group_size=4, max_staleness=0),
    sampler=SamplerConfig(min_pool=4, pool_per_domain=6))


async def test_intake_stops_at_the_pool_size_and_skips_domains_outside_the_mix(bus, nats_server):
    """With pool_per_domain 6, intake gates structured tasks until 6 are accepted (a few more
    may be in flight), never gates python (not in the mix), and reports the pool by domain."""
    from structlog.testing import capture_logs

    b = await Bus.connect(bus_settings(nats_server.url), Identity("sampler", "s1", "r1"))
    try:
        with capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                await tg.start(sampler_actor.run, b, POOL_CONFIG)
                with anyio.fail_after(60):
                    while not any(e["event"] == "intake.completed" for e in logs):
                        await anyio.sleep(0.05)
                b.stopping.set()
    finally:
        await b.close()
    [done] = [e for e in logs if e["event"] == "intake.completed"]
    assert set(done["by_domain"]) == {"structured"} and done["not_gated"] == ["python"]
    assert 6 <= done["by_domain"]["structured"] <= 8  # the gate lanes (2) may finish past 6
    assert done["accepted"] + sum(done["rejected"].values()) < 20  # of 40
