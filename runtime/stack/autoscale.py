"""Autoscaling for the local supervisor: instance counts follow queue backlog, within bounds.

Consumes the `[autoscale]` section and the backlog (undelivered plus unacked messages) of the
durable consumers each kind reads; produces scale targets in KV (`scale.<kind>`, the same
path `whet scale` takes, so the supervisor applies them) and `autoscale.scaled` events.

The policy (`step`) is a pure function: the count wanted is the backlog over
`backlog_per_instance`, within [min, max]. It scales up to that at once, at most every
`up_cooldown_s`; it scales down one instance at a time, only once the backlog has needed
fewer instances for `down_cooldown_s` and no change happened in that time. While a kind is
autoscaled, the autoscaler owns its count: a `whet scale` is undone at the next change.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import anyio
import structlog

from bus import subjects
from bus.errors import BusUnavailable
from bus.messages import ScaleTarget
from runtime.sections import AutoscaleConfig, KindPolicy

log = structlog.get_logger("runtime.stack.autoscale")


@dataclass(frozen=True)
class KindState:
    """Where one kind stands: its count, when it last changed, when its backlog last needed
    at least that many instances."""

    count: int
    changed_at: float = -math.inf
    needed_at: float = -math.inf


def wanted(policy: KindPolicy, backlog: int) -> int:
    """Instances the backlog asks for, within [min, max]."""
    return min(policy.max, max(policy.min, math.ceil(backlog / policy.backlog_per_instance)))


def step(policy: KindPolicy, state: KindState, backlog: int, now: float) -> KindState:
    """The next state: up to the wanted count (after the up cooldown), down by one (after the
    backlog has needed fewer for the down cooldown), or unchanged."""
    want = wanted(policy, backlog)
    needed_at = now if want >= state.count else state.needed_at
    if state.count < policy.min or state.count > policy.max:
        return KindState(min(policy.max, max(policy.min, state.count)), now, now)
    if want > state.count and now - state.changed_at >= policy.up_cooldown_s:
        return KindState(want, now, now)
    quiet = min(now - needed_at, now - state.changed_at)
    if want < state.count and quiet >= policy.down_cooldown_s:
        return KindState(state.count - 1, now, needed_at)
    return replace(state, needed_at=needed_at)


def backlog_of(queues: list[str], states: dict[str, dict[str, dict[str, int]]]) -> int:
    """Undelivered plus unacked messages over `queues` ('STREAM/durable'); a consumer that does
    not exist yet counts its whole stream (`states[stream]['']['stored']`)."""
    total = 0
    for queue in queues:
        stream, durable = queue.split("/")
        consumers = states.get(stream, {})
        c = consumers.get(durable)
        total += c["pending"] + c["in_flight"] if c else consumers.get("", {}).get("stored", 0)
    return total


async def run_autoscaler(bus, cfg: AutoscaleConfig, counts) -> None:
    """Every `interval_s`: read backlogs, step each kind, write the targets that changed.
    `counts()` gives the supervisor's live counts per kind."""
    states: dict[str, KindState] = {}
    streams = sorted({q.split("/")[0] for kind in cfg.kinds for q in cfg.queues(kind)})
    while True:
        try:
            found = {st.name: {**st.consumers, "": {"stored": st.messages}}
                     for st in await bus.stream_states(streams)}
            now = time.monotonic()
            for kind, policy in sorted(cfg.kinds.items()):
                current = counts().get(kind, 0)
                before = replace(states.get(kind, KindState(current)), count=current)
                backlog = backlog_of(cfg.queues(kind), found)
                states[kind] = step(policy, before, backlog, now)
                if states[kind].count != current:
                    await bus.kv_put(subjects.BUCKET_RUN, subjects.scale_key(kind),
                                     ScaleTarget(kind=kind, count=states[kind].count,
                                                 requested_at=time.time()))
                    log.info("autoscale.scaled", kind=kind, before=current,
                             after=states[kind].count, backlog=backlog)
        except (BusUnavailable, OSError, TimeoutError) as exc:
            log.warning("autoscale.check_failed", error=repr(exc))
        await anyio.sleep(cfg.interval_s)
