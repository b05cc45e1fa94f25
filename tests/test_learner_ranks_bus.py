"""A learner of world_size 2 whose ranks are processes of their own (`[learner] ranks = "bus"`),
meeting through KV on a real nats-server, as two hosts would: each process has its own
config, run directory and checkpoint folder (no shared disk). The test plays the judge
(synthetic verdicts) and the supervisor (it starts again a process that exits).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from actors.learner_rank import rank_of
from bus import subjects
from bus.errors import ConfigError
from bus.messages import LearnerRankClaim, LearnerRendezvous
from tests.conftest import ROOT, until, until_sync
from tests.test_learner_crash import named, publish_all, synthetic_verdicts

pytestmark = pytest.mark.stack


def host_config(tmp_path: Path, host: str, checkpoint_every: int) -> Path:
    path = tmp_path / f"{host}.toml"
    path.write_text(f"""
[bus]
ack_wait_s = 3.0
[model]
name = "tiny"
[learner]
lr = 0.001
micro_batch_size = 1
checkpoint_every = {checkpoint_every}
checkpoint_dir = "{tmp_path / host / 'ckpt'}"
world_size = 2
ranks = "bus"
rendezvous_timeout_s = 60
[training]
mode = "async"
batch_size = 4
group_size = 2
max_staleness = 1000
""")
    return path


class Rank:
    """One rank's process on its own 'host' (folder), started again when it exits."""

    def __init__(self, tmp_path: Path, url: str, kind: str, instance: str, host: str,
                 checkpoint_every: int) -> None:
        self.kind, self.instance, self.url = kind, instance, url
        self.config = host_config(tmp_path, host, checkpoint_every)
        self.run_dir = tmp_path / host / "run"
        self.proc: subprocess.Popen | None = None
        self.exits: list[int] = []
        "Exit codes of the processes that ended on their own."

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.stack.actor", "--kind", self.kind, "--instance",
             self.instance, "--config", str(self.config), "--url", self.url,
             "--run-dir", str(self.run_dir)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
            stdout=open(self.run_dir / f"{self.instance}.out", "ab"), stderr=subprocess.STDOUT)

    def supervise(self) -> None:
        """What a supervisor does: a process that ended is started again."""
        if self.proc is not None and self.proc.poll() is not None:
            self.exits.append(self.proc.returncode)
            self.start()

    def events(self) -> list[dict]:
        path = self.run_dir / "logs" / f"{self.instance}.jsonl"
        if not path.exists():
            return []
        text = path.read_text()
        # Only whole lines: a rank may be halfway through writing the last one.
        return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines() if line.strip()]

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        if self.proc:
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def wait_for(ranks: list[Rank], predicate, timeout_s: float = 90.0) -> list[dict]:
    """Rank 0's events once `predicate` holds, supervising both ranks meanwhile."""
    seen: list[list[dict]] = []

    def holds() -> bool:
        events = ranks[0].events()
        if predicate(events):
            seen.append(events)
            return True
        for rank in ranks:
            rank.supervise()
        return False

    def story() -> str:
        tails = {r.instance: (r.run_dir / f"{r.instance}.out").read_text()[-1500:] for r in ranks}
        return f"rank 0 events: {[e['event'] for e in ranks[0].events()][-10:]}; outputs: {tails}"

    until_sync(holds, timeout_s, story)
    return seen[-1]


def pair(tmp_path: Path, url: str, checkpoint_every: int) -> list[Rank]:
    return [Rank(tmp_path, url, "learner", "learner-1", "host0", checkpoint_every),
            Rank(tmp_path, url, "learner_rank", "learner_rank-1", "host1", checkpoint_every)]


def steps_done(events: list[dict]) -> int:
    return len(named(events, "learner.step_completed"))


async def test_ranks_meet_through_kv_train_and_after_rank_1_is_killed_resume_each_verdict_once(
        bus, nats_server, tmp_path):
    """Rank 0 publishes generation 1, rank 1 claims it, and together they train (each step
    sums both ranks' tokens). kill -9 of rank 1 after step 3: rank 0 notices and exits on its
    own, both come back (the test supervises), meet under generation 2, resume from the last
    checkpoint (step 2), and every verdict is in exactly one surviving update. Each 'host'
    holds its own checkpoint folder, with its own optimizer shard."""
    verdicts = synthetic_verdicts(10)
    ranks = pair(tmp_path, nats_server.url, checkpoint_every=2)
    for rank in reversed(ranks):  # rank 1 first: it waits in KV for rank 0
        rank.start()
    try:
        await publish_all(bus, verdicts)
        before = await anyio.to_thread.run_sync(lambda: wait_for(
            ranks, lambda ev: any(e["fields"]["step"] == 3 for e in named(ev, "learner.step_completed"))))
        first = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_LEARNER_RENDEZVOUS,
                                 LearnerRendezvous)
        claim = await bus.kv_get(subjects.BUCKET_RUN, subjects.rank_key(1), LearnerRankClaim)
        ranks[1].kill9()
        everything = await anyio.to_thread.run_sync(lambda: wait_for(
            ranks, lambda ev: trained_after_resume(ev[len(before):]) >= len(verdicts), 150))
        record = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_LEARNER_RENDEZVOUS,
                                  LearnerRendezvous)
    finally:
        for rank in ranks:
            rank.stop()
    assert (first.generation, first.world_size, first.host) == (1, 2, "127.0.0.1")
    assert (claim.generation, claim.state, claim.instance) == (1, "joined", "learner_rank-1")
    assert ranks[0].exits and ranks[0].exits[0] != 0, "rank 0 did not leave on its own"
    assert record.generation == 2
    after = everything[len(before):]
    steps_before = named(before, "learner.step_completed")
    assert {(e["fields"]["samples"], e["fields"]["tokens"]) for e in steps_before} == {(4, 48)}
    assert len(steps_before) * 4 < len(verdicts), "the kill did not land mid-run"
    [resumed] = named(after, "learner.resumed")
    saved = resumed["fields"]["step"]
    assert saved >= 2 and resumed["fields"]["optimizer_steps"] == saved
    surviving = [e for e in steps_before if e["fields"]["step"] <= saved]
    surviving += named(after, "learner.step_completed")
    trained = [vid for e in surviving for vid in e["fields"]["trained"]]
    assert sorted(trained) == sorted(v.verdict_id for v in verdicts)
    assert named(after, "learner.step_completed")[0]["fields"]["step"] == saved + 1
    assert not named(everything, "learner.ledger_mismatch") + named(everything, "learner.consumed_twice")
    generations = [e["fields"]["generation"] for e in named(ranks[1].events(), "learner.rank_seated")]
    assert generations == [1, 2]
    tag = (tmp_path / "host0/ckpt/latest").read_text()
    host0 = sorted(p.name for p in (tmp_path / "host0/ckpt" / tag).iterdir())
    host1 = sorted(p.name for p in (tmp_path / "host1/ckpt/rank-1" / tag).iterdir())
    assert host0 == ["bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt", "mp_rank_00_model_states.pt"]
    assert host1 == ["bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", "mp_rank_00_model_states.pt"]


def trained_after_resume(events: list[dict]) -> int:
    resumed = named(events, "learner.resumed")
    if not resumed:
        return 0
    return resumed[0]["fields"]["samples"] + sum(
        e["fields"]["samples"] for e in named(events, "learner.step_completed"))


# --- the rendezvous alone: real bus and store, no model --------------------------------


def bus_learner(**fields):
    from policy.config import LearnerConfig

    return LearnerConfig(world_size=2, ranks="bus", rendezvous_timeout_s=2.0, **fields)


async def test_a_rank_joins_each_generation_once_and_its_replacement_ends_it_for_rank_0(bus):
    """Rank 0 publishes generation 1; rank 1 claims it. A second process of rank 1 waits past
    it (it does not join a generation taken before), and that claim makes rank 0's watch
    raise PeerLost; the next generation seats the new process, and rank 1's watch of the
    old one raises Superseded."""
    from policy.rendezvous import (PeerLost, Superseded, open_meeting, seated, take_seat,
                                   watch_generation, watch_seats)

    lc = bus_learner()
    first = await open_meeting(bus, lc)
    old = await take_seat(bus, lc, 1, "first")
    assert (first.generation, old.generation, old.port) == (1, 1, first.port)
    seats = await seated(bus, first)
    assert {rank: claim.incarnation for rank, claim in seats.items()} == {1: "first"}

    async def claims_watched() -> bool:  # a consumer on the claims' keys is bound: it is open
        claims = subjects.kv_subject(subjects.BUCKET_RUN, subjects.KEY_LEARNER_RANKS)
        return any(c.config.filter_subject == claims and c.push_bound
                   for c in await bus.js.consumers_info(subjects.kv_stream(subjects.BUCKET_RUN)))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            async def replace() -> None:
                await until(claims_watched, 10, "rank 0's watch of the rank claims open")
                await take_seat(bus, lc, 1, "second")

            tg.start_soon(replace)
            with pytest.raises(PeerLost, match="rank 1 was replaced"):
                await watch_seats(bus, first, seats)
            second = await open_meeting(bus, lc)
            with pytest.raises(Superseded, match="generation 2"):
                await watch_generation(bus, old)
    claim = await bus.kv_get(subjects.BUCKET_RUN, subjects.rank_key(1), LearnerRankClaim)
    assert (second.generation, claim.generation, claim.incarnation) == (2, 2, "second")


async def test_waiting_ranks_and_a_wrong_world_size_fail_clearly(bus):
    """No rank 0 within the timeout: RendezvousTimeout naming the key; a rank 0 of another
    world size: RendezvousError; a rank 0 nobody joins: RendezvousTimeout naming rank 1."""
    from policy.rendezvous import RendezvousError, RendezvousTimeout, open_meeting, take_seat

    lc = bus_learner()
    with pytest.raises(RendezvousTimeout, match="learner.rendezvous within 2 s"):
        await take_seat(bus, lc, 1, "a")
    await open_meeting(bus, msgspec.structs.replace(lc, world_size=3))
    with pytest.raises(RendezvousError, match="world_size 3"):
        await take_seat(bus, lc, 1, "a")
    meeting = await open_meeting(bus, lc)
    with pytest.raises(RendezvousTimeout, match=r"ranks \[1\] did not arrive"):
        await anyio.to_thread.run_sync(meeting.join, "gloo")


async def test_a_peer_whose_heartbeats_stop_is_lost(bus):
    """A rank beating every 0.2 s is watched without complaint; once its beats stop (a host
    gone without closing its sockets), PeerLost comes after 5 intervals, not days later."""
    import time

    from bus.messages import Heartbeat
    from policy.rendezvous import BEATS_MISSED, PeerLost, watch_beats

    def beat() -> Heartbeat:
        return Heartbeat(kind="learner_rank", instance="learner_rank-1", pid=1, host="h",
                         state="ready", started_at=0.0, beat_at=time.time(), interval_s=0.2)

    key = subjects.actor_key("learner_rank", "learner_rank-1")
    await bus.kv_put(subjects.BUCKET_ACTORS, key, beat())
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            async def beating() -> None:
                for _ in range(10):  # 2 s of beats, longer than 5 intervals
                    await anyio.sleep(0.2)  # staging: a peer beats every interval
                    await bus.kv_put(subjects.BUCKET_ACTORS, key, beat())

            tg.start_soon(beating)
            with pytest.raises(PeerLost, match="sent no heartbeat for 1 s"):
                await watch_beats(bus, "learner_rank", "learner_rank-1", "learner rank 1")
            last = (await bus.kv_get(subjects.BUCKET_ACTORS, key, Heartbeat)).beat_at
    assert time.time() - last >= BEATS_MISSED * 0.2 * 0.9


async def test_an_outage_of_the_bus_is_not_a_lost_peer(bus, nats_server):
    """The server is down for 10 beat intervals while the peer keeps beating (its puts wait
    for the server): the watch, whose own side was cut off too, does not call the peer lost;
    once the beats stop for good with the server up, it does."""
    import time

    from bus.messages import Heartbeat
    from policy.rendezvous import PeerLost, watch_beats

    key = subjects.actor_key("learner_rank", "learner_rank-1")
    beating = anyio.Event()

    async def beat() -> None:
        await bus.kv_put(subjects.BUCKET_ACTORS, key, Heartbeat(
            kind="learner_rank", instance="learner_rank-1", pid=1, host="h", state="ready",
            started_at=0.0, beat_at=time.time(), interval_s=0.2))

    await beat()
    with anyio.fail_after(40):
        async with anyio.create_task_group() as tg:
            async def peer() -> None:
                while not beating.is_set():
                    await beat()
                    await anyio.sleep(0.2)  # staging: a peer beats every interval
                for _ in range(5):  # beats again after the outage, then stops
                    await beat()
                    await anyio.sleep(0.2)  # staging: a peer beats every interval

            async def outage() -> None:
                async def watched() -> bool:  # the watch's consumer exists: it is open
                    [state] = await bus.stream_states([subjects.kv_stream(subjects.BUCKET_ACTORS)])
                    return bool(state.consumers)

                await until(watched, 10)
                await anyio.sleep(0.5)  # staging: a few beats reach the open watch
                nats_server.kill()
                await anyio.sleep(2.0)  # staging: the outage must outlast 5 intervals
                await anyio.to_thread.run_sync(nats_server.start)
                beating.set()

            tg.start_soon(peer)
            tg.start_soon(outage)
            with pytest.raises(PeerLost, match="sent no heartbeat"):
                await watch_beats(bus, "learner_rank", "learner_rank-1", "learner rank 1")
            assert beating.is_set(), "called lost during the outage"


def test_a_rank_is_the_number_its_instance_name_ends_in():
    """learner_rank-1 is rank 1; a name without a rank in range, or ranks left to rank 0
    (children), is refused with what to change."""
    lc = bus_learner()
    assert rank_of("learner_rank-1", lc) == 1
    assert rank_of("learner_rank-learner-rank-1", lc) == 1  # compose: KIND-<hostname>
    with pytest.raises(ConfigError, match="rank 1 to 1"):
        rank_of("learner_rank-2", lc)
    with pytest.raises(ConfigError, match="learner_rank-<rank>"):
        rank_of("learner_rank-3f9a1c", lc)
    with pytest.raises(ConfigError, match='ranks = "bus"'):
        rank_of("learner_rank-1", msgspec.structs.replace(lc, ranks="children"))
