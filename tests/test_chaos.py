"""Chaos: kill -9 actors and the nats-server during a training run; nothing is lost or doubled.

The whole pipeline runs as separate processes under `whet up` (sampler, generator with the
fake engine, judge, executor, learner on the tiny model) against the test's own
nats-server. Tasks come from `tests.support.quiet_scripts`, which the uniformly sampling fake
engine solves about one time in four, so rewards differ within groups and the learner
really trains. A seeded schedule kills each actor kind and the server with SIGKILL, each
kill once the stack is whole again and work has moved on since the previous one; the
learner dies between a trained step and the checkpoint that would hold it, so that step is
lost and its verdicts come back. Then admission stops, the run drains and stops, and every
admitted attempt is traced to exactly one fate.

CI runs one seed with one instance of each kind. `CHAOS_SEED`, `CHAOS_REPLICAS` (instances
of each stateless kind: generator, judge, executor) and `CHAOS_ROUNDS` (times through the
kill schedule) vary it, for example
`CHAOS_SEED=3 CHAOS_REPLICAS=2 .venv/bin/pytest tests/test_chaos.py -s`.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter

import anyio
import pytest

from bus import subjects
from bus.messages import SamplerState, Verdict
from runtime.broker.embedded import alive
from runtime.cli.stack_status import StackStatus, gather
from tests.support.chaos import (LearnerRecord, admitted_attempts, events, learner_record,
                                 repeated)
from tests.conftest import patiently, until

pytestmark = pytest.mark.stack

GROUP = 4
KINDS = ("sampler", "generator", "judge", "executor", "learner")
SEED = int(os.environ.get("CHAOS_SEED", "7"))
REPLICAS = int(os.environ.get("CHAOS_REPLICAS", "1"))
"Instances of each stateless kind (generator, judge, executor)."
ROUNDS = int(os.environ.get("CHAOS_ROUNDS", "1"))
STATELESS = ("generator", "judge", "executor")
SCHEDULE = (["nats"] * 3 + ["learner", "executor", "judge", "generator"] * 2 + ["sampler"]) * ROUNDS
"Twelve kills a round; the seed shuffles their order and timing."
PROGRESS = 2 * GROUP
"Verdicts stored between two kills, so that work keeps flowing."
CHECKPOINT_EVERY = 2
"Every other step is trained but not yet saved: where the learner is killed."
WORK_STREAMS = (subjects.STREAM_TASKS, subjects.STREAM_ROUNDS, subjects.STREAM_ATTEMPTS,
                subjects.STREAM_EXEC, subjects.STREAM_EXEC_DONE, subjects.STREAM_TURNS)

CONFIG = f"""
[actors.count]
sampler = 1
generator = {REPLICAS}
judge = {REPLICAS}
executor = {REPLICAS}
learner = 1

[supervisor]
heartbeat_s = 1.0
drain_s = 5.0
restart_backoff_s = 0.5
restart_backoff_max_s = 2.0

[training]
mode = "async"
batch_size = {GROUP}
group_size = {GROUP}
max_staleness = 2

[model]
name = "tiny"
max_context = 512

[generator]
engine = "fake"
fake_vocab = 4
[generator.sampling]
max_new_tokens = 4

[learner]
lr = 0.001
micro_batch_size = 4
checkpoint_every = {CHECKPOINT_EVERY}

[executor]
concurrency = 2
[executor.sandbox]
backend = "subprocess"

[envs]
mix = {{ quiet = 1.0 }}
[envs.use.quiet_scripts]
target = "tests.support.quiet_scripts:ENVIRONMENT"
count = 12
heldout_share = 0.0
checks = ["determinism"]
[envs.gates.sandbox]
backend = "subprocess"
"""


def healthy(snap: StackStatus, since: float = 0.0) -> bool:
    """Every instance of every kind ready, beating since `since`, its process alive."""
    ready = Counter(a.kind for a in snap.actors
                    if a.state == "ready" and alive(a.pid) and snap.at - a.beat_age_s > since)
    return all(ready[k] >= (REPLICAS if k in STATELESS else 1) for k in KINDS)


async def verdict_count(bus) -> int:
    [state] = await bus.stream_states([subjects.STREAM_VERDICTS])
    return state.messages


class Chaos:
    """Kills on a seeded schedule, each once the stack is healthy and work has moved on. The
    learner is killed when it has trained a step that no checkpoint holds yet, the moment
    a sample could be trained twice; the others at a random phase of their work."""

    def __init__(self, bus, server, run_dir) -> None:
        self.bus, self.server, self.run_dir = bus, server, run_dir
        self.rng = random.Random(SEED)
        self.killed: list[tuple[str, int]] = []
        self.last_server_start = 0.0

    async def wait_until(self, predicate, timeout_s: float = 180.0) -> StackStatus:
        snap = None

        async def holds() -> bool:
            nonlocal snap
            snap = await patiently(lambda: gather(self.bus))
            return await predicate(snap)

        await until(holds, timeout_s, lambda: f"a stack status for which {predicate.__qualname__}")
        return snap

    async def settled_and_moving(self, since_verdicts: int) -> StackStatus:
        async def ok(snap: StackStatus) -> bool:
            return (healthy(snap, self.last_server_start)
                    and await patiently(lambda: verdict_count(self.bus)) >= since_verdicts + PROGRESS)
        return await self.wait_until(ok)

    async def run(self) -> bool:
        """Kill on schedule; True once the stack is healthy again and work moved on."""
        schedule = SCHEDULE[:]
        self.rng.shuffle(schedule)
        verdicts = await patiently(lambda: verdict_count(self.bus))
        for target in schedule:
            snap = await self.settled_and_moving(verdicts)
            verdicts = await patiently(lambda: verdict_count(self.bus))
            if target == "learner":
                await self.learner_between_checkpoints()
            else:
                await anyio.sleep(self.rng.uniform(0.0, 1.5))  # staging: a kill at a random moment
            if target == "nats":
                self.server.kill()
                await anyio.sleep(self.rng.uniform(0.5, 2.0))  # staging: an outage of random length
                await anyio.to_thread.run_sync(self.server.start)
                self.last_server_start = time.time()
                self.killed.append(("nats", 0))
            else:
                actor = self.rng.choice(sorted(
                    (a for a in snap.actors if a.kind == target and a.state == "ready"),
                    key=lambda a: a.instance))
                os.kill(actor.pid, signal.SIGKILL)
                self.killed.append((target, actor.pid))
        snap = await self.settled_and_moving(verdicts)
        return healthy(snap, self.last_server_start)

    async def learner_between_checkpoints(self) -> None:
        def unsaved() -> bool:
            steps = [e for e in events(self.run_dir, "learner-1") if e["event"] in (
                "learner.step_completed", "learner.checkpoint_saved", "learner.resumed")]
            return (bool(steps) and steps[-1]["event"] == "learner.step_completed"
                    and steps[-1]["fields"]["step"] % CHECKPOINT_EVERY != 0)
        await until(unsaved, 120, "the learner past a step it has not checkpointed")


async def drained(bus, run_dir) -> bool:
    """Nothing waits in the work queues, and the learner has consumed every verdict stored
    (it acks the last ones when it saves its checkpoint at the stop)."""
    states = {s.name: s for s in await bus.stream_states(
        [*WORK_STREAMS, subjects.STREAM_VERDICTS])}
    verdicts = states[subjects.STREAM_VERDICTS]
    consumed = {vid for vid, _ in learner_record(events(run_dir, "learner-1")).fates()}
    return (all(states[s].messages == 0 for s in WORK_STREAMS if s in states)
            and verdicts.consumers[subjects.CONSUMER_LEARNER.durable]["pending"] == 0
            and len(consumed) >= verdicts.messages)


async def drain_and_stop(bus, stack) -> None:
    """Stop admission, let every admitted attempt through, then `whet down`."""
    assert stack.proc.poll() is None, "whet up died during the chaos"
    scaled = await anyio.to_thread.run_sync(lambda: stack.whet("scale", "sampler=0"))
    assert scaled.returncode == 0, scaled.stderr
    await until(lambda: patiently(lambda: drained(bus, stack.run_dir)), 120,
                "every admitted attempt through")
    await anyio.to_thread.run_sync(stack.stop)


async def admitted_by_sampler(bus, run_dir) -> set[str]:
    """Attempt ids the sampler's events name, checked against its own persisted count."""
    admitted = admitted_attempts(events(run_dir, "sampler-1"), GROUP)
    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
    assert len(admitted) == state.admitted > 0
    return admitted


def fates_with_reasons(record: LearnerRecord, verdicts: dict[str, Verdict]) -> dict[str, str]:
    """Each consumed verdict id: 'trained', or why not (a judge's drop gives its cause)."""
    fates = record.fates()
    assert repeated(vid for vid, _ in fates) == {}, "a verdict was consumed twice"
    return {vid: verdicts[vid].cause if fate == "dropped" else fate for vid, fate in fates}


async def test_chaos_every_admitted_attempt_has_one_fate(make_stack, bus, nats_server):
    """Twelve kill -9s (each actor kind, the server three times) during a run; afterwards every
    admitted attempt has exactly one verdict and exactly one fate in the surviving learner
    updates (trained, or left out with a reason), none trained twice, and the queues drain."""
    stack = make_stack(CONFIG)
    await anyio.to_thread.run_sync(stack.start)
    chaos = Chaos(bus, nats_server, stack.run_dir)
    began = time.monotonic()
    recovered = await chaos.run()
    chaos_s = time.monotonic() - began
    await drain_and_stop(bus, stack)

    kills = Counter(kind for kind, _ in chaos.killed)
    assert sum(kills.values()) >= 10 * ROUNDS and set(kills) == {*KINDS, "nats"}, kills
    assert recovered, "after the last kill every actor is back, reconnected, and work flows"
    outcome = await reconcile(bus, stack)
    print(f"chaos seed {SEED}, replicas {REPLICAS}, {chaos_s:.0f} s, kills {dict(kills)}, "
          f"{outcome}")


async def reconcile(bus, stack) -> str:
    """After a drained run: every admitted attempt has exactly one verdict and exactly one
    fate in the surviving learner updates (trained, or left out with a reason), none is
    trained twice, and nothing is left queued, dead-lettered or unacked. Returns a summary."""
    admitted = await admitted_by_sampler(bus, stack.run_dir)
    stored = [v async for _, v, _ in bus.replay(
        subjects.STREAM_VERDICTS, subjects.verdict_subject("train"), Verdict, follow=False)]
    assert repeated(v.verdict_id for v in stored) == {}, "an attempt has two verdicts"
    assert all(v.verdict_id == v.attempt.attempt_id for v in stored)
    verdicts = {v.verdict_id: v for v in stored}
    assert set(verdicts) == admitted

    record = learner_record(events(stack.run_dir, "learner-1"))
    assert [s["step"] for s in record.steps] == list(range(1, len(record.steps) + 1))
    for resumed in record.resumes:  # the checkpoint's ledger holds what its steps consumed
        assert resumed["consumed_by_steps"] == record.consumed_through(resumed["step"]), resumed
    learner_errors = [e for e in events(stack.run_dir, "learner-1") if e["level"] == "error"]
    assert learner_errors == [], learner_errors[:3]
    fates = fates_with_reasons(record, verdicts)
    trained = [vid for vid, fate in fates.items() if fate == "trained"]
    dropped = {vid: why for vid, why in fates.items() if why != "trained"}
    assert len(admitted) == len(trained) + len(dropped) and set(fates) == admitted
    assert all(dropped.values()), "dropped without a reason"
    assert len(trained) >= 4 * GROUP, f"too little was trained to mean anything: {len(trained)}"

    states = {s.name: s for s in await bus.stream_states(
        [*WORK_STREAMS, subjects.STREAM_DLQ, subjects.STREAM_VERDICTS])}
    assert all(states[s].messages == 0 for s in WORK_STREAMS if s in states)
    assert states[subjects.STREAM_DLQ].messages == 0, "work was dead-lettered"
    learner = states[subjects.STREAM_VERDICTS].consumers[subjects.CONSUMER_LEARNER.durable]
    assert (learner["pending"], learner["in_flight"]) == (0, 0), "verdicts left unacked"
    return (f"admitted {len(admitted)}, "
            f"trained {len(trained)}, dropped {dict(Counter(dropped.values()))}, "
            f"learner steps {len(record.steps)} (+{record.lost_steps} lost and redone), "
            f"restarts resumed from a checkpoint {len(record.resumes)}")
