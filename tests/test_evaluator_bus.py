"""The evaluator over a real nats-server: eval rounds, per-domain pass rates, transfer, and
the warning when training reward rises while held-out pass rate does not.

The test plays the generator and the judge: it reads the eval assignments and publishes
verdicts. Events are read back from the events stream, as `whet tail` would.
"""

from __future__ import annotations

import time

import anyio
import structlog

from actors import evaluator as evaluator_actor
from bus import subjects
from bus.consumer import consume
from bus.messages import (Attempt, EvaluatorState, Event, TaskAssignment, Verdict,
                          WeightVersion)
from bus.nats_bus import Bus, Identity
from envs.config import EnvEntry, EnvsConfig, EvaluatorConfig
from runtime import log as log_mod
from runtime.config import RunConfig
from tests.conftest import bus_settings

CONFIG = RunConfig(
    envs=EnvsConfig(use={"structured_output": EnvEntry(count=40, heldout_share=0.5, gate=False),
                         "python_functions": EnvEntry(count=40, heldout_share=0.5, gate=False)},
                    mix={"structured": 1.0}),
    evaluator=EvaluatorConfig(tasks_per_domain=5, window=2, reward_rise=0.1))
"Python is held out entirely from training (mix 0): its pass rate measures transfer."

PASSES = {"structured": 3, "python": 1}
"Of each round's 5 tasks per domain, this many pass."


async def _answer(bus: Bus, got: list[TaskAssignment], version: int) -> None:
    seen: dict[str, int] = {}
    for a in got:
        n = seen[a.task.domain] = seen.get(a.task.domain, 0) + 1
        attempt = Attempt(attempt_id=f"{a.assignment_id}.0", group_id=a.assignment_id, index=0,
                          group_size=1, task=a.task, turns=[], policy_version=version,
                          purpose="eval")
        ok = n <= PASSES[a.task.domain]
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
    with anyio.fail_after(30):
        while len(found) < n:
            found = [e async for _, e, _ in bus.replay(subjects.STREAM_EVENTS,
                                                       subjects.event_filter("evaluator"), Event,
                                                       follow=False)
                     if e is not None and e.event == name]
            await anyio.sleep(0.2)
    return found


async def test_rounds_report_heldout_pass_rates_transfer_and_divergence(bus, nats_server):
    """Round 0 runs before any weights are published; each round's verdicts become an
    `evaluator.evaluated` event keyed by the attempts' version; training reward rising with
    flat held-out rates raises `evaluator.divergence_detected`."""
    got: list[TaskAssignment] = []

    async def generator(a: TaskAssignment, delivery) -> None:
        got.append(a)

    sink = log_mod.configure(kind="evaluator", instance="e1", run_id="r1", console=False)
    ebus = await Bus.connect(bus_settings(nats_server.url), Identity("evaluator", "e1", "r1"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sink.forward, ebus)
            tg.start_soon(lambda: consume(bus, subjects.CONSUMER_TASKS, TaskAssignment, generator))
            await tg.start(evaluator_actor.run, ebus, CONFIG)
            with anyio.fail_after(30):
                while len(got) < 10:
                    await anyio.sleep(0.05)
            await _train_rewards(bus, got[0].task, 0, 0.1)
            await anyio.sleep(0.5)
            await _answer(bus, got, 0)
            first = (await _events(bus, "evaluator.evaluated", 1))[0]
            with anyio.fail_after(10):  # what a holding learner waits for
                while True:
                    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE,
                                             EvaluatorState)
                    if state is not None and state.last_reported == 0:
                        break
                    await anyio.sleep(0.1)
            await _train_rewards(bus, got[0].task, 1, 0.6)
            await anyio.sleep(0.5)
            await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                             WeightVersion(version=1, object_name="", created_at=time.time()))
            with anyio.fail_after(30):
                while len(got) < 20:
                    await anyio.sleep(0.05)
            await _answer(bus, got[10:], 1)
            warning = (await _events(bus, "evaluator.divergence_detected", 1))[0]
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
