"""`whet status`: a snapshot of a running stack, read from the bus.

Consumes the actor registry (heartbeats in KV), stream and consumer state, the policy
version, the dead-letter count, the monitor's latest `MetricsSnapshot` (KV, when a monitor
runs), the evaluator's newest `EvalRound` (KV, when one was reported) and the
`ActorFailure`s of kinds whose crash loop stopped the stack; produces a `StackStatus` value
(with the judges' tool calls tallied), rendered as tables or JSON by the CLI. An actor
whose last beat is older than three of its intervals is shown as `dead`. `gather_patiently`
asks again through a brief outage (`bus.nats_retry.retry`). It changes nothing.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace

import msgspec

from bus import subjects
from bus.messages import ActorFailure, EvalRound, EvaluatorState, Heartbeat, MetricsSnapshot, WeightVersion
from bus.nats_bus import Bus
from bus.nats_retry import retry
from runtime.stack.tool_tally import ToolTally, tally

@dataclass
class ActorRow:
    """One actor process as `whet status` shows it."""

    kind: str
    instance: str
    pid: int
    state: str
    beat_age_s: float
    uptime_s: float
    processed: int
    in_flight: int
    per_s: float
    policy_version: int
    stats: dict[str, float]


@dataclass
class StreamRow:
    """One stream (and a consumer of it) as `whet status` shows it."""

    stream: str
    messages: int
    consumer: str = ""
    pending: int = 0
    in_flight: int = 0
    redelivered: int = 0


@dataclass
class StackStatus:
    """Everything `whet status` shows of a running stack."""

    actors: list[ActorRow] = field(default_factory=list)
    streams: list[StreamRow] = field(default_factory=list)
    policy_version: int = -1
    dead_letters: int = 0
    at: float = 0.0
    metrics: MetricsSnapshot | None = None
    "The monitor's latest snapshot, if a monitor runs."
    failing: list[ActorFailure] = field(default_factory=list)
    "Kinds whose crash loop stopped the stack, with the cause."
    heldout: EvalRound | None = None
    "The evaluator's newest round result, if one was reported."
    tools: ToolTally = field(default_factory=ToolTally)
    "Tool calls of tool episodes, from the judges' gauges (empty without tool episodes)."

    def live(self, kind: str) -> int:
        """Instances of `kind` that are beating and ready."""
        return sum(a.kind == kind and a.state == "ready" for a in self.actors)

    def as_dict(self) -> dict:
        out = asdict(replace(self, metrics=None, failing=[], heldout=None))
        out["tools"] = self.tools.as_dict()
        out["metrics"] = msgspec.to_builtins(self.metrics) if self.metrics else None
        out["heldout"] = msgspec.to_builtins(self.heldout) if self.heldout else None
        out["failing"] = [failing_dict(f) for f in self.failing]
        return out


def failing_dict(failure: ActorFailure) -> dict:
    """An `ActorFailure` as plain JSON fields (without its wire tag)."""
    out = msgspec.to_builtins(failure)
    out.pop("t", None)
    return out


def actor_row(beat: Heartbeat, now: float) -> ActorRow:
    """One registry entry as a row; marks it dead when its beats have stopped."""
    age = now - beat.beat_at
    state = beat.state
    if state != "stopped" and age > beat.silence_limit_s:
        state = "dead"
    uptime = max(beat.beat_at - beat.started_at, 1e-9)
    return ActorRow(kind=beat.kind, instance=beat.instance, pid=beat.pid, state=state,
                    beat_age_s=round(age, 1), uptime_s=round(uptime, 1),
                    processed=beat.processed, in_flight=beat.in_flight,
                    per_s=round(beat.processed / uptime, 2),
                    policy_version=beat.policy_version, stats=dict(beat.stats))


async def gather(bus: Bus, *, include_stopped: bool = False) -> StackStatus:
    """Read the stack's state from the bus."""
    now = time.time()
    beats = await bus.kv_items(subjects.BUCKET_ACTORS, Heartbeat)
    rows = sorted((actor_row(b, now) for b in beats.values()), key=lambda r: (r.kind, r.instance))
    if not include_stopped:
        rows = [r for r in rows if r.state != "stopped"]
    streams = []
    dead_letters = 0
    for st in await bus.stream_states(subjects.WORK_STREAMS):
        if st.name == subjects.STREAM_DLQ:
            dead_letters = st.messages
        if not st.consumers:
            streams.append(StreamRow(st.name, st.messages))
        for name, c in st.consumers.items():
            streams.append(StreamRow(st.name, st.messages, name, c["pending"], c["in_flight"],
                                     c["redelivered"]))
    policy = await bus.kv_get(subjects.BUCKET_POLICY, subjects.KEY_POLICY, WeightVersion)
    metrics = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_METRICS, MetricsSnapshot)
    failing = await bus.kv_items(subjects.BUCKET_RUN, ActorFailure, prefix=subjects.FAILING_PREFIX)
    return StackStatus(actors=rows, streams=streams,
                       policy_version=policy.version if policy else -1,
                       dead_letters=dead_letters, at=now, metrics=metrics,
                       failing=sorted(failing.values(), key=lambda f: f.kind),
                       heldout=await latest_round(bus),
                       tools=tally(r.stats for r in rows if r.kind == "judge"))


READ_DEADLINE_S = 30.0
"How long `gather_patiently` asks again before it says the bus is out of reach."


async def gather_patiently(bus: Bus, *, include_stopped: bool = False,
                           deadline_s: float = READ_DEADLINE_S) -> StackStatus:
    """`gather`, asked again while the server is out of reach for now: a node that has just
    rejoined a cluster takes client requests before its replicated buckets answer through
    it, and a restarting server drops the connection. After `deadline_s`, `BusUnavailable`
    naming what was read and the last error; a refused request is `PermissionDenied` at once."""
    return await retry(lambda: gather(bus, include_stopped=include_stopped),
                       what="read the stack's status", deadline_s=deadline_s,
                       first_delay_s=0.25, max_delay_s=2.0,
                       denied=lambda since: bus.raise_if_denied(since, "", containing="$js.api"))


async def latest_round(bus: Bus) -> EvalRound | None:
    """The evaluator's newest round result, found through its state's `latest_key`."""
    state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE, EvaluatorState)
    if state is None or not state.latest_key:
        return None
    return await bus.kv_get(subjects.BUCKET_RUN, state.latest_key, EvalRound)
