"""Chaos: kill -9 and SIGSTOP actors and the server, fill the disk; nothing lost or doubled.

Consumes a whole `whet up` stack (all 7 kinds, fake engine, tiny model) on the test's own
nats-server, its run folder on a 512 MB tmpfs of its own (`tests.support.disk`), tasks from
`tests.support.quiet_scripts`. A seeded schedule kills each kind and the server (the learner
between a trained step and its checkpoint), freezes one actor and the server past the ack
wait, and fills the run folder's disk until the learner's checkpoint waits for room, then
frees it. Then the run drains and stops; every admitted attempt has exactly one fate, every
round one report, nothing is dead-lettered or unacked. Prints one summary line (kills,
pauses, disk full) that bench/chaos/chaos_seeds.py reads. It does not time recoveries.
CI runs one seed; `CHAOS_SEED`, `CHAOS_REPLICAS` (generators, judges, executors each) and
`CHAOS_ROUNDS` (times through the schedule) vary it.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest

from bus import subjects
from bus.messages import DeadLetter, EvaluatorState, SamplerState, Verdict
from runtime.broker.embedded import alive
from runtime.cli.stack_status import StackStatus, gather
from bus.messages.control import MISSED_BEATS
from tests.support.chaos import (LearnerRecord, admitted_attempts, events, learner_record,
                                 patient_max_deliver, repeated, supervisor_said)
from tests.conftest import patiently, until
from tests.support.disk import fill, small_disk

pytestmark = pytest.mark.stack

GROUP = 4
KINDS = ("sampler", "generator", "judge", "executor", "learner", "evaluator", "monitor")
SEED = int(os.environ.get("CHAOS_SEED", "7"))
REPLICAS = int(os.environ.get("CHAOS_REPLICAS", "1"))
"Instances of each stateless kind (generator, judge, executor)."
ROUNDS = int(os.environ.get("CHAOS_ROUNDS", "1"))
STATELESS = ("generator", "judge", "executor")
PAUSES = ("pause", "pause-nats")
"SIGSTOP of one actor (of a seeded kind), and of the server."
DISK_FULL = "disk-full"
"The run folder's filesystem filled until the learner's checkpoint waits for room, then freed."
SCHEDULE = (["nats", "learner"] * 2 + [k for k in KINDS if k != "learner"] + [*PAUSES]
            + [DISK_FULL]) * ROUNDS
"Ten kills, two pauses and a full disk a round; the seed shuffles their order and timing."
RUNS_DISK = "512m"
"The run folder's own filesystem: a run here peaked at 133 MB (two checkpoints kept; seed 7)."
HEARTBEAT_S = 1.0
ACK_WAIT_S = 3.0
PAUSE_S = max(ACK_WAIT_S, MISSED_BEATS * HEARTBEAT_S) + 2.0
"An actor stays frozen past its messages' ack wait and the supervisor's heartbeat limit."
SERVER_PAUSE_S = 9.0
"The server stays frozen past the ack wait and the clients' ping limit (4 pings of 2 s)."
EVERY_VERSIONS = 2
WATCHERS = (subjects.CONSUMER_EVALUATOR, subjects.CONSUMER_MONITOR_TRAIN,
            subjects.CONSUMER_MONITOR_EVAL)
"Durables on the verdicts beside the learner's: drained too, before the stop."
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
evaluator = 1
monitor = 1

[supervisor]
heartbeat_s = {HEARTBEAT_S}
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
[generator.eval_sampling]
max_new_tokens = 4

[learner]
lr = 0.001
micro_batch_size = 4
checkpoint_every = {CHECKPOINT_EVERY}

[evaluator]
every_versions = {EVERY_VERSIONS}
tasks_per_domain = 2
round_timeout_s = 120

[monitor]
prometheus_port = 0

[executor]
concurrency = 2
[executor.sandbox]
backend = "subprocess"

[envs]
mix = {{ quiet = 1.0 }}
[envs.use.quiet_scripts]
target = "tests.support.quiet_scripts:ENVIRONMENT"
count = 16
heldout_share = 0.25
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
    """Kills and pauses on a seeded schedule, each once the stack is healthy and work has moved
    on. The learner is killed when it has trained a step that no checkpoint holds yet, the
    moment a sample could be trained twice; the others at a random phase of their work."""

    def __init__(self, bus, server, run_dir, runs_disk: Path | None = None) -> None:
        self.bus, self.server, self.run_dir, self.runs_disk = bus, server, run_dir, runs_disk
        self.rng = random.Random(SEED)
        self.killed: list[tuple[str, int]] = []
        self.paused: list[tuple[str, int]] = []
        "(kind or 'nats', pid) of each process frozen and thawed."
        self.disk_full: list[float] = []
        "Seconds the disk stayed full each time: until the learner's checkpoint waited for room."
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
        """Kill and pause on schedule; True once the stack is healthy again and work moved on."""
        schedule = SCHEDULE[:]
        self.rng.shuffle(schedule)
        verdicts = await patiently(lambda: verdict_count(self.bus))
        for target in schedule:
            snap = await self.settled_and_moving(verdicts)
            verdicts = await patiently(lambda: verdict_count(self.bus))
            if target == "learner":
                await self.learner_between_checkpoints()
            else:
                await anyio.sleep(self.rng.uniform(0.0, 1.5))  # staging: a fault at a random moment
            if target == "nats":
                self.server.kill()
                await anyio.sleep(self.rng.uniform(0.5, 2.0))  # staging: an outage of random length
                await anyio.to_thread.run_sync(self.server.start)
                self.last_server_start = time.time()
                self.killed.append(("nats", 0))
            elif target == "pause-nats":
                await self.pause_server()
            elif target == "pause":
                await self.pause_actor(self.pick(snap, self.rng.choice(KINDS)))
            elif target == DISK_FULL:
                await self.fill_disk()
            else:
                actor = self.pick(snap, target)
                os.kill(actor.pid, signal.SIGKILL)
                self.killed.append((target, actor.pid))
        snap = await self.settled_and_moving(verdicts)
        return healthy(snap, self.last_server_start)

    def pick(self, snap: StackStatus, kind: str):
        ready = (a for a in snap.actors if a.kind == kind and a.state == "ready")
        return self.rng.choice(sorted(ready, key=lambda a: a.instance))

    async def pause_actor(self, actor) -> None:
        """Freeze `actor` until the supervisor says it is unresponsive and its messages' ack
        wait has passed, then thaw it and see the supervisor say it beats again."""
        def said(event: str) -> bool:
            return supervisor_said(self.run_dir, event, actor.instance, actor.pid)

        os.kill(actor.pid, signal.SIGSTOP)
        began = time.monotonic()
        try:
            await until(lambda: said("actor.unresponsive"), 60,
                        f"actor.unresponsive for the frozen {actor.instance} (pid {actor.pid})")
            left_s = max(0.0, began + PAUSE_S - time.monotonic())
            await anyio.sleep(left_s)  # staging: frozen past the ack wait too
        finally:
            os.kill(actor.pid, signal.SIGCONT)
        self.paused.append((actor.kind, actor.pid))
        await until(lambda: said("actor.responsive"), 60,
                    f"actor.responsive for the thawed {actor.instance} (pid {actor.pid})")

    async def fill_disk(self) -> None:
        """Fill the run folder's filesystem until the learner's checkpoint waits for room
        (its `learner.disk_full` gauge), free it, and see the checkpoint written (the gauge
        back to 0, `learner.disk_room_back` in its log) with every actor process the same
        as before: none died of the full disk."""
        assert self.runs_disk is not None, "a disk-full fault needs the run folder's own disk"

        async def all_ready(snap: StackStatus) -> bool:
            return healthy(snap, self.last_server_start)

        before = await self.wait_until(all_ready)

        async def learner_gauge(value: float) -> bool:
            snap = await patiently(lambda: gather(self.bus))
            return any(a.kind == "learner" and a.state == "ready"
                       and a.stats.get("learner.disk_full") == value for a in snap.actors)

        filler = await anyio.to_thread.run_sync(fill, self.runs_disk)
        began = time.monotonic()
        try:
            await until(lambda: learner_gauge(1.0), 120, "the learner's checkpoint waiting for room")
        finally:
            filler.unlink()
        waited = time.monotonic() - began
        await until(lambda: learner_gauge(0.0), 120, "the learner's checkpoint written once freed")
        await until(lambda: sum(e["event"] == "learner.disk_room_back" for e in events(
                        self.run_dir, "learner-1")) > len(self.disk_full), 60,
                    "learner.disk_room_back in the learner's log")
        after = await self.wait_until(all_ready)
        assert pids(after) == pids(before), "an actor died while the disk was full"
        self.disk_full.append(round(waited, 1))

    async def pause_server(self) -> None:
        """Freeze the server past the ack wait and the clients' ping limit, then thaw it; the
        supervisor's connection says it went and came back."""
        pid, began = self.server.proc.pid, time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            await anyio.sleep(SERVER_PAUSE_S)  # staging: a server frozen, not gone
        finally:
            os.kill(pid, signal.SIGCONT)
        self.last_server_start = time.time()
        self.paused.append(("nats", pid))

        def reconnected() -> bool:
            seen = [e["event"] for e in events(self.run_dir, "supervisor") if e["ts"] >= began
                    and e["event"] in ("bus.disconnected", "bus.reconnected")]
            return ("bus.disconnected" in seen
                    and "bus.reconnected" in seen[seen.index("bus.disconnected"):])
        await until(reconnected, 60, "bus.disconnected then bus.reconnected after the server froze")

    async def learner_between_checkpoints(self) -> None:
        def unsaved() -> bool:
            steps = [e for e in events(self.run_dir, "learner-1") if e["event"] in (
                "learner.step_completed", "learner.checkpoint_saved", "learner.resumed")]
            return (bool(steps) and steps[-1]["event"] == "learner.step_completed"
                    and steps[-1]["fields"]["step"] % CHECKPOINT_EVERY != 0)
        await until(unsaved, 120, "the learner past a step it has not checkpointed")


def pids(snap: StackStatus) -> dict[str, int]:
    """Each ready instance's process id."""
    return {a.instance: a.pid for a in snap.actors if a.state == "ready"}


async def undrained(bus, run_dir) -> str:
    """What still waits, or "" once drained: nothing in the work queues, the learner has
    consumed every train verdict stored (it acks the last ones when it saves its checkpoint
    at the stop), and the evaluator has reported the last round it started."""
    states = {s.name: s for s in await bus.stream_states(
        [*WORK_STREAMS, subjects.STREAM_VERDICTS])}
    verdicts = states[subjects.STREAM_VERDICTS]
    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE, EvaluatorState)
    waiting = [f"{s}: {states[s].messages} queued" for s in WORK_STREAMS
               if s in states and states[s].messages]
    learner = verdicts.consumers[subjects.CONSUMER_LEARNER.durable]
    if learner["pending"]:
        waiting.append(f"learner: {learner['pending']} verdicts pending")
    if state is None or state.last_reported != state.last_round:
        waiting.append(f"evaluator: {state and (state.last_round, state.last_reported)} "
                       "(last round, last reported)")
    watchers = {spec.durable: verdicts.consumers[spec.durable] for spec in WATCHERS}
    waiting += [f"{name}: pending {c['pending']}, in flight {c['in_flight']}"
                for name, c in watchers.items() if c["pending"] or c["in_flight"]]
    if waiting:
        return "; ".join(waiting)
    consumed = {vid for vid, _ in learner_record(events(run_dir, "learner-1")).fates()}
    stored = len(await stored_verdicts(bus, "train"))
    return "" if len(consumed) >= stored else \
        f"learner-1 logged fates of {len(consumed)} of {stored} stored train verdicts"


async def stored_verdicts(bus, purpose: str) -> list[Verdict]:
    return [v async for _, v, _ in bus.replay(
        subjects.STREAM_VERDICTS, subjects.verdict_subject(purpose), Verdict, follow=False)]


async def drain_and_stop(bus, stack) -> None:
    """Stop admission, let every admitted attempt through, then `whet down`."""
    assert stack.proc.poll() is None, "whet up died during the chaos"
    scaled = await anyio.to_thread.run_sync(lambda: stack.whet("scale", "sampler=0"))
    assert scaled.returncode == 0, scaled.stderr
    left = ["not yet read"]

    async def through() -> bool:
        left[0] = await patiently(lambda: undrained(bus, stack.run_dir))
        return not left[0]

    await until(through, 120, lambda: f"every admitted attempt through; left: {left[0]}")
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


@pytest.fixture
def runs_disk(tmp_path):
    """The stack's runs folder on a filesystem of its own (`RUNS_DISK`), for the disk-full
    fault; set up before the stack, so it is unmounted after the stack has stopped."""
    with small_disk(tmp_path / "runs", RUNS_DISK) as folder:
        yield folder


async def test_chaos_every_admitted_attempt_has_one_fate(runs_disk, make_stack, bus, nats_server):
    """Ten kill -9s (each of the seven kinds, the learner and the server twice), two freezes
    (an actor, the server) and a full disk under the run folder during a run; afterwards every
    admitted attempt has exactly one verdict and exactly one fate in the surviving learner
    updates (trained, or left out with a reason), none trained twice, every verdict one trial
    record, every round started one report, and the queues drain."""
    stack = make_stack(CONFIG, f"ack_wait_s = {ACK_WAIT_S}\nrequest_timeout_s = 2.0\n"
                       f"max_deliver = {patient_max_deliver(ACK_WAIT_S)}")
    await anyio.to_thread.run_sync(stack.start)
    chaos = Chaos(bus, nats_server, stack.run_dir, runs_disk)
    began = time.monotonic()
    recovered = await chaos.run()
    chaos_s = time.monotonic() - began
    await drain_and_stop(bus, stack)

    kills = Counter(kind for kind, _ in chaos.killed)
    pauses = Counter(kind for kind, _ in chaos.paused)
    assert sum(kills.values()) == 10 * ROUNDS and set(kills) == {*KINDS, "nats"}, kills
    assert sum(pauses.values()) == 2 * ROUNDS and "nats" in pauses, pauses
    assert len(chaos.disk_full) == ROUNDS, chaos.disk_full
    assert recovered, "after the last fault every actor is back, reconnected, and work flows"
    outcome = await reconcile(bus, stack)
    rounds = await reconcile_rounds(bus, stack.run_dir)
    print(f"chaos seed {SEED}, replicas {REPLICAS}, {chaos_s:.0f} s, kills {dict(kills)}, "
          f"pauses {dict(pauses)}, disk full {len(chaos.disk_full)} (full for "
          f"{chaos.disk_full} s), {outcome}, {rounds}")


async def reconcile(bus, stack) -> str:
    """After a drained run: every admitted attempt has exactly one verdict and exactly one
    fate in the surviving learner updates (trained, or left out with a reason), none is
    trained twice, and nothing is left queued, dead-lettered or unacked. Returns a summary."""
    admitted = await admitted_by_sampler(bus, stack.run_dir)
    stored = await stored_verdicts(bus, "train")
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
    if states[subjects.STREAM_DLQ].messages:
        letters = [(d.consumer, d.reason, d.deliveries, d.error[:300])
                   for _, d in await bus.snapshot(subjects.STREAM_DLQ, DeadLetter) if d]
        raise AssertionError(f"work was dead-lettered: {letters}")
    info = await bus.js.consumer_info(subjects.STREAM_VERDICTS, subjects.CONSUMER_LEARNER.durable)
    assert info.config.max_deliver == patient_max_deliver(ACK_WAIT_S), info.config
    learner = states[subjects.STREAM_VERDICTS].consumers[subjects.CONSUMER_LEARNER.durable]
    assert (learner["pending"], learner["in_flight"]) == (0, 0), "verdicts left unacked"
    return (f"admitted {len(admitted)} = trained {len(trained)} + left out {len(dropped)} "
            f"{dict(Counter(dropped.values()))}, "
            f"learner steps {len(record.steps)} (+{record.lost_steps} lost and redone), "
            f"restarts resumed from a checkpoint {len(record.resumes)}")


async def reconcile_rounds(bus, run_dir) -> str:
    """Every round the evaluator started is reported exactly once, complete (a restarted
    evaluator reads back what its open round had counted); its state says so; the monitor
    recorded every verdict as exactly one trial and left none unacked. Returns a summary."""
    ev = events(run_dir, "evaluator-1")
    started = {e["fields"]["version"] for e in ev if e["event"] == "evaluator.round_started"}
    reports = [e["fields"] for e in ev if e["event"] == "evaluator.evaluated"]
    assert repeated((r["round"], r["version"]) for r in reports) == {}, "a round reported twice"
    assert {r["round"] for r in reports} == started and len(started) >= 2, (started, reports)
    assert all(r["complete"] for r in reports), [r for r in reports if not r["complete"]]
    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE, EvaluatorState)
    assert state.last_round == state.last_reported == max(started), state

    evals = await stored_verdicts(bus, "eval")
    assert repeated(v.verdict_id for v in evals) == {}, "an eval attempt has two verdicts"
    states = {s.name: s for s in await bus.stream_states(
        [subjects.STREAM_VERDICTS, subjects.STREAM_TRIALS])}
    consumers = states[subjects.STREAM_VERDICTS].consumers
    for spec in WATCHERS:
        counts = consumers[spec.durable]
        assert (counts["pending"], counts["in_flight"]) == (0, 0), spec
    trials = states[subjects.STREAM_TRIALS].messages
    assert trials == states[subjects.STREAM_VERDICTS].messages, (trials, "trials for verdicts")
    return (f"rounds {len(started)} started = {len({r['round'] for r in reports})} reported "
            f"({len(evals)} eval verdicts), trials {trials}")
