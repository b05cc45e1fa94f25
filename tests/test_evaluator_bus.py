"""The evaluator over a real nats-server: eval rounds, per-domain pass rates, transfer, and
the warning when training reward rises while held-out pass rate does not.

The test plays the generator and the judge: it reads the eval assignments and publishes
verdicts. Events are read back from the events stream, as `whet tail` would.
"""

from __future__ import annotations

import collections
import time

import anyio
import msgspec
import pytest
import structlog

from actors import evaluator as evaluator_actor
from bus import subjects
from bus.consumer import consume
from bus.messages import (Attempt, EvalRound, EvaluatorState, Event, TaskAssignment, Verdict,
                          WeightVersion)
from bus.nats_bus import Bus, Identity
from envs.config import EnvEntry, EnvsConfig, EvaluatorConfig
from runtime import log as log_mod
from runtime.config import RunConfig
from tests.conftest import bus_settings, handled, until

pytestmark = pytest.mark.bus

CONFIG = RunConfig(
    envs=EnvsConfig(use={"structured_output": EnvEntry(count=40, heldout_share=0.5, gate=False),
                         "python_functions": EnvEntry(count=40, heldout_share=0.5, gate=False)},
                    mix={"structured": 1.0}),
    evaluator=EvaluatorConfig(tasks_per_domain=5, window=2, reward_rise=0.1))
"Python is held out entirely from training (mix 0): its pass rate measures transfer."

PASSES = {0: {"structured": {1, 2, 3}, "python": {1}},
          1: {"structured": {3, 4, 5}, "python": {1}}}
"""Which of each round's 5 tasks per domain pass (1-based, in publishing order): version 1
gains two structured tasks and loses two, so its pass rate stays flat."""


class RoundReader:
    """Plays the generator: keeps the round assignments it is given; `wait(n)` returns once
    n have come (woken by each one, not by a clock)."""

    def __init__(self) -> None:
        self.got: list[TaskAssignment] = []
        self._more = anyio.Event()

    async def handle(self, assignment: TaskAssignment, delivery) -> None:
        self.got.append(assignment)
        self._more.set()
        self._more = anyio.Event()

    async def wait(self, n: int, timeout_s: float = 30.0) -> None:
        with anyio.fail_after(timeout_s):
            while len(self.got) < n:
                await self._more.wait()


async def _answer(bus: Bus, got: list[TaskAssignment], version: int) -> None:
    seen: dict[str, int] = {}
    for a in got:
        n = seen[a.task.domain] = seen.get(a.task.domain, 0) + 1
        attempt = Attempt(attempt_id=f"{a.assignment_id}.0", group_id=a.assignment_id, index=0,
                          group_size=1, task=a.task, turns=[], policy_version=version,
                          purpose="eval")
        ok = n in PASSES[version][a.task.domain]
        v = Verdict(verdict_id=attempt.attempt_id, attempt=attempt,
                    outcome="pass" if ok else "fail", reward=float(ok), trainable=False)
        await bus.publish(subjects.verdict_subject("eval"), v, msg_id=v.verdict_id)


async def _train_rewards(bus: Bus, task, version: int, reward: float) -> None:
    for i in range(4):
        attempt = Attempt(attempt_id=f"t{version}-{i}.0", group_id=f"t{version}-{i}", index=0,
                          group_size=1, task=task, turns=[], policy_version=version)
        v = Verdict(verdict_id=attempt.attempt_id, attempt=attempt, outcome="pass", reward=reward)
        await bus.publish(subjects.verdict_subject("train"), v, msg_id=v.verdict_id)


async def _events(bus: Bus, name: str, n: int) -> list[Event]:
    found: list[Event] = []

    async def logged() -> bool:
        nonlocal found
        found = [e async for _, e, _ in bus.replay(subjects.STREAM_EVENTS,
                                                   subjects.event_filter("evaluator"), Event,
                                                   follow=False)
                 if e is not None and e.event == name]
        return len(found) >= n

    await until(logged, 30, f"{n} {name} events")
    return found


async def _round(bus: Bus, version: int) -> EvalRound:
    state = None

    async def reported() -> bool:  # the result is written before last_reported moves
        nonlocal state
        state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE,
                                 EvaluatorState)
        return state is not None and state.last_reported >= version

    await until(reported, 30, f"the evaluator's state reporting version {version}")
    assert state.latest_key == subjects.eval_round_key(version, version)
    result = await bus.kv_get(subjects.BUCKET_RUN, state.latest_key, EvalRound)
    assert result is not None
    return result


async def test_rounds_report_heldout_pass_rates_transfer_and_divergence(bus, nats_server):
    """Round 0 runs before any weights are published; each round's verdicts become a typed
    `EvalRound` in KV (pass rates with Wilson intervals, paired with version 0 on the same
    tasks) and an `evaluator.evaluated` event keyed by the attempts' version; training reward
    rising with flat held-out rates raises `evaluator.divergence_detected`."""
    rounds = RoundReader()
    got = rounds.got

    sink = log_mod.configure(kind="evaluator", instance="e1", run_id="r1", console=False)
    ebus = await Bus.connect(bus_settings(nats_server.url), Identity("evaluator", "e1", "r1"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sink.forward, ebus)
            tg.start_soon(lambda: consume(bus, subjects.CONSUMER_ROUNDS, TaskAssignment, rounds.handle))
            await tg.start(evaluator_actor.run, ebus, CONFIG)
            await rounds.wait(10)
            await _train_rewards(bus, got[0].task, 0, 0.1)
            await handled(bus, subjects.CONSUMER_EVALUATOR_TRAIN)  # the evaluator has them
            await _answer(bus, got, 0)
            first = (await _events(bus, "evaluator.evaluated", 1))[0]
            round0 = await _round(bus, 0)  # what a holding learner waits for
            await _train_rewards(bus, got[0].task, 1, 0.6)
            await handled(bus, subjects.CONSUMER_EVALUATOR_TRAIN)
            await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                             WeightVersion(version=1, object_name="", created_at=time.time()))
            await rounds.wait(20)
            await _answer(bus, got[10:], 1)
            warning = (await _events(bus, "evaluator.divergence_detected", 1))[0]
            round1 = await _round(bus, 1)
            ebus.stopping.set()
            bus.stopping.set()
            tg.cancel_scope.cancel()
    finally:
        structlog.reset_defaults()
        await ebus.close()
    assert all(a.purpose == "eval" and a.group_size == 1 and a.task.split == "heldout"
               for a in got)
    assert len({a.task.task_id for a in got[:10]}) == 10
    assert {a.task.task_id for a in got[:10]} == {a.task.task_id for a in got[10:]}
    f = first.fields
    assert f["version"] == f["policy_version"] == 0 and f["complete"] is True
    assert f["overall"] == 0.4
    assert f["pass_rates"] == {"python": 0.2, "structured": 0.6}
    assert f["rewards"] == {"python": 0.2, "structured": 0.6} and f["reward"] == 0.4
    assert f["trained"] == {"structured": 0.6} and f["transfer"] == {"python": 0.2}
    assert f["train_reward"] == 0.1
    assert warning.level == "warning" and warning.fields["policy_version"] == 1
    assert "rose +0.500" in warning.fields["reason"]
    # Typed results: 4 of 10 pass, Wilson [0.1682, 0.6873]; round 0 is its own baseline.
    assert (round0.round, round0.version, round0.baseline_version) == (0, 0, 0)
    assert round0.overall.rate == 0.4 and round0.overall.tasks == 10
    assert (round(round0.overall.low, 4), round(round0.overall.high, 4)) == (0.1682, 0.6873)
    assert round0.trained.rate == 0.6 and round0.transfer.rate == 0.2
    assert round0.train_reward == 0.1 and round0.complete and len(round0.tasks) == 10
    # Version 1, paired with version 0 on the same 10 tasks: structured gained 2, lost 2.
    assert round1.overall.rate == 0.4 and round1.baseline_version == 0
    o, t = round1.overall, round1.trained
    assert (o.paired, o.gained, o.lost, o.p_value, o.delta) == (10, 2, 2, 1.0, 0.0)
    assert (t.paired, t.gained, t.lost) == (5, 2, 2) and round1.transfer.gained == 0
    assert round1.domains["structured"].gained == 2 and round1.train_reward == 0.6
    assert f["gained"] == f["lost"] == 0 and f["paired"] == 10 and f["low"] == 0.1682
    # Per rung: the stratified choice spreads python's 5 tasks over its rungs; each rung's
    # score counts its own tasks, in the typed result and in the event.
    rungs = collections.Counter((a.task.domain, int(a.task.difficulty)) for a in got[:10])
    assert len({r for d, r in rungs if d == "python"}) > 1
    assert {(d, r): s.tasks for d, rs in round1.rungs.items() for r, s in rs.items()} == rungs
    assert sum(s.paired for s in round1.rungs["structured"].values()) == 5
    assert {(d, int(r)): v["tasks"] for d, rs in f["rungs"].items()
            for r, v in rs.items()} == rungs


async def test_k_samples_per_task_make_one_group_per_task_and_an_unbiased_pass_at_1(bus, nats_server):
    """With samples_per_task = 2 each held-out task is one assignment of 2 attempts; the round
    completes at 2 verdicts per task (a redelivered one counted once) and reports pass@1 as
    the mean of per-task rates: tasks at 2/2, 1/2, 0/2, ... give (1 + 0.5) / 10 here."""
    cfg = msgspec.structs.replace(CONFIG, evaluator=msgspec.structs.replace(
        CONFIG.evaluator, samples_per_task=2))
    rounds = RoundReader()
    got = rounds.got

    ebus = await Bus.connect(bus_settings(nats_server.url), Identity("evaluator", "e1", "r1"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: consume(bus, subjects.CONSUMER_ROUNDS, TaskAssignment, rounds.handle))
            await tg.start(evaluator_actor.run, ebus, cfg)
            await rounds.wait(10)
            for n, a in enumerate(got):
                for i in range(a.group_size):
                    attempt = Attempt(attempt_id=f"{a.assignment_id}.{i}", group_id=a.assignment_id,
                                      index=i, group_size=a.group_size, task=a.task, turns=[],
                                      policy_version=0, purpose="eval")
                    ok = (n == 0) or (n == 1 and i == 0)
                    v = Verdict(verdict_id=attempt.attempt_id, attempt=attempt,
                                outcome="pass" if ok else "fail", reward=float(ok), trainable=False)
                    for copy in range(1 + (n == 0)):  # the first task's verdicts arrive twice
                        await bus.publish(subjects.verdict_subject("eval"), v,
                                          msg_id=f"{v.verdict_id}-{copy}")
            result = await _round(bus, 0)
            ebus.stopping.set()
            bus.stopping.set()
            tg.cancel_scope.cancel()
    finally:
        await ebus.close()
    assert all(a.group_size == 2 for a in got) and len(got) == 10
    assert result.samples_per_task == 2 and result.complete
    assert (result.overall.tasks, result.overall.attempts) == (10, 20)
    assert result.overall.rate == pytest.approx(0.15)
    assert sorted((o.passed, o.judged) for o in result.tasks.values())[-2:] == [(1, 2), (2, 2)]


async def test_without_the_initial_round_the_first_round_is_the_first_version_due(bus, nats_server):
    """`initial_round = false`: nothing is published for version 0, even when version 0 is
    announced; version 1's round comes when it is announced, and it is its own baseline."""
    rounds = RoundReader()
    got = rounds.got

    cfg = msgspec.structs.replace(CONFIG, evaluator=msgspec.structs.replace(
        CONFIG.evaluator, initial_round=False))
    ebus = await Bus.connect(bus_settings(nats_server.url), Identity("evaluator", "e1", "r1"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: consume(bus, subjects.CONSUMER_ROUNDS, TaskAssignment, rounds.handle))
            await tg.start(evaluator_actor.run, ebus, cfg)
            await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                             WeightVersion(version=0, object_name="", created_at=time.time()))
            await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                             WeightVersion(version=1, object_name="", created_at=time.time()))
            await rounds.wait(10)
            await _answer(bus, got, 1)
            round1 = await _round(bus, 1)
            ebus.stopping.set()
            bus.stopping.set()
            tg.cancel_scope.cancel()
    finally:
        await ebus.close()
    assert {a.admitted_version for a in got} == {1} and len(got) == 10
    assert (round1.round, round1.baseline_version) == (1, 1) and round1.overall.rate == 0.4


async def test_version_0_is_evaluated_even_when_training_moved_on_during_intake(bus, nats_server):
    """The learner trains while the held-out tasks are gated: when the evaluator is ready the
    policy is already at version 3 (not a multiple of every_versions = 2), yet round 0 is
    published, at version 0 (the generators sample it from a pinned copy)."""
    rounds = RoundReader()
    got = rounds.got

    cfg = msgspec.structs.replace(CONFIG, evaluator=msgspec.structs.replace(
        CONFIG.evaluator, every_versions=2))
    await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                     WeightVersion(version=3, object_name="x", created_at=time.time()))
    ebus = await Bus.connect(bus_settings(nats_server.url), Identity("evaluator", "e1", "r1"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: consume(bus, subjects.CONSUMER_ROUNDS, TaskAssignment, rounds.handle))
            await tg.start(evaluator_actor.run, ebus, cfg)
            await rounds.wait(10)
            ebus.stopping.set()
            bus.stopping.set()
            tg.cancel_scope.cancel()
    finally:
        await ebus.close()
    assert {a.admitted_version for a in got} == {0} and len(got) == 10


async def test_the_round_gauges_follow_the_oldest_open_round(bus, nats_server):
    """Version 1's round starts while version 0's is still open (the main job's last round
    starts before its first is done): the gauges the live line reads keep counting version 0's
    attempts until it is reported, then show version 1's, not version 1's 0/N throughout."""
    from bus import gauges

    rounds = RoundReader()
    got = rounds.got
    ebus = await Bus.connect(bus_settings(nats_server.url), Identity("evaluator", "e1", "r1"))
    shown = lambda: tuple(int(ebus.stats.gauges.get(g, -9)) for g in (  # noqa: E731
        gauges.ROUND_VERSION, gauges.ROUND_JUDGED, gauges.ROUND_SIZE, gauges.ROUND_REPORTED))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: consume(bus, subjects.CONSUMER_ROUNDS, TaskAssignment, rounds.handle))
            await tg.start(evaluator_actor.run, ebus, CONFIG)
            await rounds.wait(10)
            await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                             WeightVersion(version=1, object_name="", created_at=time.time()))
            await rounds.wait(20)
            await _answer(bus, got[:3], 0)
            await until(lambda: shown()[1] == 3, 30, lambda: f"3 of round 0 shown: {shown()}")
            first = shown()
            await _answer(bus, got[3:10], 0)
            await _round(bus, 0)
            await until(lambda: shown()[0] == 1, 30, lambda: f"round 1 shown: {shown()}")
            second = shown()
            ebus.stopping.set()
            bus.stopping.set()
            tg.cancel_scope.cancel()
    finally:
        await ebus.close()
    assert first == (0, 3, 10, -1)
    assert second == (1, 0, 10, 0)
