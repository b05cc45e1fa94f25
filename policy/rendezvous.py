"""Where the learner's ranks meet when each is a process of its own (`[learner] ranks = "bus"`).

Consumes the bus (KV whet-run: `learner.rendezvous`, `learner.rank.<k>`), the learner
section and a rank; produces a `Meeting`, whose `join` forms the torch.distributed process
group (gloo or NCCL over TCP): rank 0 opens it (`open_meeting`), rank k takes a seat
(`take_seat`). It also watches a generation end (`watch_seats`, `watch_generation`,
`watch_beats`): a host gone without closing its sockets would otherwise hold a collective
for days. Every wait has a finite timeout and says what is missing; every error is a
`RendezvousError` (the actor crashes; its supervisor restarts it).
It trains nothing, and does not decide when a rank restarts (its supervisor does).
"""

from __future__ import annotations

import os
import socket
import time
import urllib.parse
from contextlib import aclosing
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Awaitable, Callable

import anyio
import structlog

from bus import subjects
from bus.messages import Heartbeat, LearnerRankClaim, LearnerRendezvous
from bus.nats_bus import Bus
from policy.config import LearnerConfig

log = structlog.get_logger("policy.rendezvous")

CONNECT_S = 30.0
"How long a rank tries to reach rank 0's store: the record names a store that listened."
COLLECTIVE_TIMEOUT = timedelta(days=7)
"""A collective may wait that long: ranks 1 and up wait in one for rank 0's next operation,
however idle the learner is. A dead peer ends it sooner (its sockets close, or its heartbeats
stop: `watch_beats`)."""
BEATS_MISSED = 5
"""Heartbeat intervals without a beat after which a peer counts as lost (`whet status` shows
an actor dead after 3; a loaded host may be late by one or two)."""


class RendezvousError(RuntimeError):
    """The learner's ranks cannot meet as configured (world size, rank out of range). The tree:

        RendezvousError        the ranks disagree
        ├── RendezvousTimeout  a rank did not arrive, or rank 0's store cannot be reached
        ├── PeerLost           a rank of the generation was replaced, or its beats stopped
        └── Superseded         rank k: rank 0 started a newer generation"""


class RendezvousTimeout(RendezvousError):
    """A rank did not arrive in time, or rank 0 could not be reached."""


class PeerLost(RendezvousError):
    """Rank 0: another process claimed a rank of this generation; the one met is gone."""


class Superseded(RendezvousError):
    """Rank k: rank 0 published a newer generation; the one joined is over."""


@dataclass
class Meeting:
    """One generation of the learner's process group, as seen by one rank.

    Rank 0 (`open_meeting`) has a c10d store listening, then a `LearnerRendezvous` of a new
    generation in KV (the store listens first, so a live record always has a listener); rank k
    (`take_seat`) claims the first generation newer than any it took before
    (`LearnerRankClaim`); every rank's `join` checks in at the store, waits for all, then forms
    the group."""

    generation: int
    host: str
    port: int
    world: int
    rank: int
    timeout_s: float
    store: Any = None
    "Rank 0: the listening c10d store; others connect in `join`."

    def env(self) -> dict[str, str]:
        """The variables DeepSpeed and `policy.trainer` read (LOCAL_RANK is kept if set)."""
        return {"MASTER_ADDR": self.host, "MASTER_PORT": str(self.port), "RANK": str(self.rank),
                "WORLD_SIZE": str(self.world), "LOCAL_RANK": os.environ.get("LOCAL_RANK", "0")}

    def join(self, backend: str) -> None:
        """Check in, wait for every rank (at most `timeout_s`), form the group. Blocking."""
        import torch.distributed as dist

        where = f"{self.host}:{self.port} (generation {self.generation})"
        if self.store is None:
            try:
                self.store = dist.TCPStore(self.host, self.port, self.world, is_master=False,
                                           timeout=timedelta(seconds=min(CONNECT_S, self.timeout_s)))
            except dist.DistError as exc:
                raise RendezvousTimeout(
                    f"learner rank {self.rank} could not reach rank 0's store at {where}: "
                    f"{str(exc).splitlines()[0]}. Is rank 0 up, and is the port open between "
                    "the hosts? ([learner] rendezvous_host / rendezvous_port)") from None
        store = dist.PrefixStore(f"whet/generation-{self.generation}", self.store)
        store.set(f"arrived/{self.rank}", "1")
        keys = [f"arrived/{r}" for r in range(self.world)]
        try:
            store.wait(keys, timedelta(seconds=self.timeout_s))
        except dist.DistError:
            missing = [r for r, key in enumerate(keys) if not store.check([key])]
            raise RendezvousTimeout(
                f"learner ranks {missing} did not arrive at {where} within {self.timeout_s:g} s. "
                "Each needs its own process: under `whet up`, [actors.count] learner_rank = "
                f"{self.world - 1}; under compose, the learner-rank service; elsewhere "
                "`whet actor learner_rank --instance learner_rank-<rank>` on the same bus.") from None
        dist.init_process_group(backend, store=store, rank=self.rank, world_size=self.world,
                                timeout=COLLECTIVE_TIMEOUT)


def route_address(url: str) -> str:
    """This host's address on its route to the first NATS server of `url`: the address a
    peer that reaches the bus most likely reaches this host at."""
    first = url.split(",")[0].strip()
    parsed = urllib.parse.urlsplit(first if "://" in first else f"nats://{first}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((parsed.hostname or "127.0.0.1", parsed.port or 4222))  # sends nothing
        return s.getsockname()[0]


async def open_meeting(bus: Bus, lc: LearnerConfig) -> Meeting:
    """Rank 0: listen, then publish a new generation's rendezvous."""
    import torch.distributed as dist

    host = lc.rendezvous_host or route_address(bus.settings.url)
    store = await anyio.to_thread.run_sync(lambda: dist.TCPStore(
        host, lc.rendezvous_port, lc.world_size, is_master=True, wait_for_workers=False,
        timeout=timedelta(seconds=lc.rendezvous_timeout_s)))
    last = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_LEARNER_RENDEZVOUS, LearnerRendezvous)
    record = LearnerRendezvous(generation=(last.generation if last else 0) + 1, host=host,
                               port=store.port, world_size=lc.world_size,
                               instance=bus.identity.instance, published_at=time.time(),
                               kind=bus.identity.kind)
    await bus.kv_put(subjects.BUCKET_RUN, subjects.KEY_LEARNER_RENDEZVOUS, record)
    log.info("learner.rendezvous_published", generation=record.generation, host=host,
             port=record.port, world_size=record.world_size)
    return Meeting(record.generation, host, record.port, lc.world_size, 0,
                   lc.rendezvous_timeout_s, store)


def _claim(bus: Bus, rank: int, generation: int, state: str, incarnation: str) -> LearnerRankClaim:
    return LearnerRankClaim(rank=rank, generation=generation, state=state,  # type: ignore[arg-type]
                            incarnation=incarnation, instance=bus.identity.instance,
                            host=socket.gethostname(), at=time.time(), kind=bus.identity.kind)


async def take_seat(bus: Bus, lc: LearnerConfig, rank: int, incarnation: str) -> Meeting:
    """Rank k: wait (at most `rendezvous_timeout_s`) for a generation newer than any this
    rank took, and claim it. Claiming 'waiting' first tells a rank 0 still holding the old
    generation that its peer is gone."""
    key = subjects.rank_key(rank)
    before = await bus.kv_get(subjects.BUCKET_RUN, key, LearnerRankClaim)
    floor = before.generation if before else 0
    await bus.kv_put(subjects.BUCKET_RUN, key, _claim(bus, rank, floor, "waiting", incarnation))
    log.info("learner.rank_waiting", rank=rank, after_generation=floor)
    record = None
    with anyio.move_on_after(lc.rendezvous_timeout_s):
        async with aclosing(bus.kv_watch(subjects.BUCKET_RUN, subjects.KEY_LEARNER_RENDEZVOUS,
                                         LearnerRendezvous)) as records:
            async for seen in records:
                if seen.generation > floor:
                    record = seen
                    break
    if record is None:
        raise RendezvousTimeout(
            f"learner rank {rank}: no rank 0 published a rendezvous newer than generation "
            f"{floor} in KV {subjects.BUCKET_RUN}/{subjects.KEY_LEARNER_RENDEZVOUS} within "
            f"{lc.rendezvous_timeout_s:g} s. Is the learner actor running on this bus with "
            "[learner] ranks = \"bus\"?")
    if record.world_size != lc.world_size or not 0 < rank < record.world_size:
        raise RendezvousError(
            f"learner rank {rank} (world_size {lc.world_size} here) cannot join rank 0's "
            f"generation {record.generation} of world_size {record.world_size}: give every "
            "rank the same [learner] world_size, and ranks 1 to world_size - 1.")
    await bus.kv_put(subjects.BUCKET_RUN, key,
                     _claim(bus, rank, record.generation, "joined", incarnation))
    log.info("learner.rank_seated", rank=rank, generation=record.generation, host=record.host,
             port=record.port)
    return Meeting(record.generation, record.host, record.port, record.world_size, rank,
                   lc.rendezvous_timeout_s)


async def seated(bus: Bus, meeting: Meeting) -> dict[int, LearnerRankClaim]:
    """Rank 0, after `join`: the claim of each other rank of this generation."""
    seats: dict[int, LearnerRankClaim] = {}
    for rank in range(1, meeting.world):
        claim = await bus.kv_get(subjects.BUCKET_RUN, subjects.rank_key(rank), LearnerRankClaim)
        if claim is None or (claim.state, claim.generation) != ("joined", meeting.generation):
            raise PeerLost(f"learner rank {rank} no longer holds generation {meeting.generation}")
        seats[rank] = claim
    return seats


async def watch_seats(bus: Bus, meeting: Meeting, seats: dict[int, LearnerRankClaim]) -> None:
    """Rank 0: raise `PeerLost` once another process claims a rank of this generation, or a
    rank's heartbeats stop."""
    await _first_to_raise(
        partial(_watch_claims, bus, meeting, {rank: c.incarnation for rank, c in seats.items()}),
        *(partial(watch_beats, bus, c.kind, c.instance, f"learner rank {c.rank}")
          for c in seats.values()))


async def _watch_claims(bus: Bus, meeting: Meeting, seats: dict[int, str]) -> None:
    async with aclosing(bus.kv_watch(subjects.BUCKET_RUN, subjects.KEY_LEARNER_RANKS,
                                     LearnerRankClaim)) as claims:
        async for claim in claims:
            if (claim.rank in seats and claim.incarnation != seats[claim.rank]
                    and claim.generation >= meeting.generation):
                raise PeerLost(
                    f"learner rank {claim.rank} was replaced ({claim.instance} on {claim.host} "
                    f"now {claim.state}): generation {meeting.generation} is over, and the "
                    "ranks meet again under a new one")


async def watch_generation(bus: Bus, meeting: Meeting) -> None:
    """Rank k: raise `Superseded` once rank 0 publishes another generation, `PeerLost` once
    rank 0's heartbeats stop."""
    record = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_LEARNER_RENDEZVOUS,
                              LearnerRendezvous)
    beats = []
    if record is not None and record.generation == meeting.generation and record.kind:
        beats.append(partial(watch_beats, bus, record.kind, record.instance, "learner rank 0"))
    await _first_to_raise(partial(_watch_generation, bus, meeting), *beats)


async def _first_to_raise(*watches: Callable[[], Awaitable[None]]) -> None:
    """Run the watches together until one raises; its error propagates on its own."""
    try:
        async with anyio.create_task_group() as tg:
            for watch in watches:
                tg.start_soon(watch)
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1 and isinstance(group.exceptions[0], RendezvousError):
            raise group.exceptions[0] from None
        raise


async def _watch_generation(bus: Bus, meeting: Meeting) -> None:
    async with aclosing(bus.kv_watch(subjects.BUCKET_RUN, subjects.KEY_LEARNER_RENDEZVOUS,
                                     LearnerRendezvous)) as records:
        async for record in records:
            if record.generation != meeting.generation:
                raise Superseded(
                    f"rank 0 started generation {record.generation}; rank {meeting.rank} "
                    f"leaves generation {meeting.generation} to meet it there")


async def watch_beats(bus: Bus, kind: str, instance: str, who: str) -> None:
    """Raise `PeerLost` once the heartbeats of `kind`/`instance` stop for `BEATS_MISSED` of
    their intervals (counted on this host's clock: the hosts' clocks may differ), while this
    side stayed connected to the bus (an outage of the bus silences every peer)."""
    key = subjects.actor_key(kind, instance)
    send, receive = anyio.create_memory_object_stream[Heartbeat](1)

    async def follow() -> None:  # the watch is never cancelled midway: that would end it
        async with send, aclosing(bus.kv_watch(subjects.BUCKET_ACTORS, key, Heartbeat)) as beats:
            async for beat in beats:
                await send.send(beat)

    async def judge() -> None:
        interval, last = 2.0, None
        async with receive:
            while True:
                reconnects = bus.watch.reconnects
                beat = None
                with anyio.move_on_after(BEATS_MISSED * interval):
                    beat = await receive.receive()
                if beat is not None:
                    interval, last = beat.interval_s, beat.beat_at
                elif not await _maybe_beating(bus, key, reconnects, last):
                    raise PeerLost(f"{who} ({instance}) sent no heartbeat for "
                                   f"{BEATS_MISSED * interval:g} s: its host or process is gone")

    await _first_to_raise(follow, judge)


async def _maybe_beating(bus: Bus, key: str, reconnects: int, last: float | None) -> bool:
    """After a quiet window: False only if this side was connected all along and the
    peer's latest beat is still the one seen before."""
    try:
        with anyio.fail_after(bus.settings.request_timeout_s):
            beat = await bus.kv_get(subjects.BUCKET_ACTORS, key, Heartbeat)
    except Exception:  # noqa: BLE001 - the bus is out of reach from here: no verdict on the peer
        return True
    return bus.watch.reconnects != reconnects or (beat is not None and beat.beat_at != last)
