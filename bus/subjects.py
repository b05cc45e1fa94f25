"""Every subject, stream, consumer and bucket name on the bus, built here and nowhere else.

Consumes plain values (actor kind, instance id, level); produces subject strings and the
declarative topology (`StreamSpec`, `ConsumerSpec`) that `bus.nats_bus` creates on the
server. Does no I/O.

Subjects are lowercase, dotted and versioned: `whet.v1.<what>[.<detail>]`. A breaking change
to a message gets a new version token here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

PREFIX = "whet.v1"

TASKS = f"{PREFIX}.tasks"
"Sampler to generators: `TaskAssignment`."
TURNS = f"{PREFIX}.turns"
"Judge to generators: an `Attempt` to continue with another turn (multi-turn work)."
ATTEMPTS = f"{PREFIX}.attempts"
"Generators to judges: an `Attempt` whose latest turn needs checking."
EXEC_REQUESTS = f"{PREFIX}.exec.requests"
"Judges to executors: `ExecutionRequest` (built from an attempt; again on retry)."
EXEC_DONE = f"{PREFIX}.exec.done"
"Executors to judges: `ExecutionDone`."
VERDICTS = f"{PREFIX}.verdicts"
"Judges to learner, sampler and evaluator: `Verdict`, as `whet.v1.verdicts.<purpose>`."
EVENTS = f"{PREFIX}.events"
"Every process: `Event`, as `whet.v1.events.<kind>.<instance>.<level>`."
DEAD_LETTERS = f"{PREFIX}.dlq"
"Any consumer: `DeadLetter`, as `whet.v1.dlq.<stream>`."

BUCKET_POLICY = "whet-policy"
"KV: key `current` holds the latest `WeightVersion`."
BUCKET_ACTORS = "whet-actors"
"KV: key `<kind>.<instance>` holds that actor's latest `Heartbeat`."
BUCKET_RUN = "whet-run"
"KV: run metadata, and `scale.<kind>` holding a `ScaleTarget`."
BUCKET_WEIGHTS = "whet-weights"
"Object store: one object per published weight version."

KEY_POLICY = "current"
KEY_SAMPLER_STATE = "sampler.state"
"whet-run: the sampler's admission counters (`SamplerState`)."
KEY_SAMPLER_RATES = "sampler.rates"
"whet-run: the sampler's per-task pass rates, in chunks `sampler.rates.<n>` (msgpack)."
KEY_GATE_PREFIX = "gate"
"whet-run: `gate.<digest>` holds one task's intake gate report (JSON), reused after a restart."
KEY_EVALUATOR_STATE = "evaluator.state"
"whet-run: the evaluator's last round and history (`EvaluatorState`)."

_TOKEN_OK = re.compile(r"[^a-z0-9_-]")


def token(value: str) -> str:
    """Make `value` safe as one subject token: lowercase, no dots, spaces or wildcards."""
    cleaned = _TOKEN_OK.sub("_", value.lower())
    return cleaned or "_"


def event_subject(kind: str, instance: str, level: str) -> str:
    """Subject of one event from one process."""
    return f"{EVENTS}.{token(kind)}.{token(instance)}.{token(level)}"


def event_filter(kind: str | None = None) -> str:
    """Filter subject for the events of one actor kind, or of all."""
    return f"{EVENTS}.{token(kind)}.>" if kind else f"{EVENTS}.>"


def verdict_subject(purpose: str) -> str:
    """Subject of a verdict for 'train' or 'eval' work."""
    return f"{VERDICTS}.{token(purpose)}"


def dead_letter_subject(stream: str) -> str:
    """Subject dead letters from `stream` are published on."""
    return f"{DEAD_LETTERS}.{token(stream)}"


def actor_key(kind: str, instance: str) -> str:
    """KV key of an actor's heartbeat."""
    return f"{token(kind)}.{token(instance)}"


def scale_key(kind: str) -> str:
    """KV key of an actor kind's desired count."""
    return f"scale.{token(kind)}"


MAX_DELIVERIES = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"


def max_deliveries_advisory(stream: str, consumer: str) -> str:
    """Server advisory published when a message of `consumer` hits max_deliver."""
    return f"{MAX_DELIVERIES}.{stream}.{consumer}"


# --- topology ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamSpec:
    """A JetStream stream to create (or update) at start."""

    name: str
    subjects: tuple[str, ...]
    retention: Literal["workqueue", "limits"]
    max_age_s: float = 0.0
    "0 keeps messages until consumed (work queues) or until max_bytes."
    max_bytes: int = -1
    discard_new: bool = True
    "True refuses new messages when full (backpressure) instead of dropping old ones."


@dataclass(frozen=True)
class ConsumerSpec:
    """A durable pull consumer one actor kind reads from."""

    stream: str
    durable: str
    filter_subject: str


STREAM_TASKS = "WHET_TASKS"
STREAM_TURNS = "WHET_TURNS"
STREAM_ATTEMPTS = "WHET_ATTEMPTS"
STREAM_EXEC = "WHET_EXEC"
STREAM_EXEC_DONE = "WHET_EXEC_DONE"
STREAM_VERDICTS = "WHET_VERDICTS"
STREAM_EVENTS = "WHET_EVENTS"
STREAM_DLQ = "WHET_DLQ"
STREAM_ADVISORIES = "WHET_ADVISORIES"


def streams(*, work_max_bytes: int, retention_s: float, events_max_bytes: int) -> list[StreamSpec]:
    """The streams whetstone needs, sized from config."""
    return [
        StreamSpec(STREAM_TASKS, (TASKS,), "workqueue", max_bytes=work_max_bytes),
        StreamSpec(STREAM_TURNS, (TURNS,), "workqueue", max_bytes=work_max_bytes),
        StreamSpec(STREAM_ATTEMPTS, (ATTEMPTS,), "workqueue", max_bytes=work_max_bytes),
        StreamSpec(STREAM_EXEC, (EXEC_REQUESTS,), "workqueue", max_bytes=work_max_bytes),
        StreamSpec(STREAM_EXEC_DONE, (EXEC_DONE,), "workqueue", max_bytes=work_max_bytes),
        # Verdicts are kept (limits retention) so traces and audits can read them after the
        # learner has acked; discard_new means a full stream refuses, never drops, a verdict.
        StreamSpec(STREAM_VERDICTS, (f"{VERDICTS}.>",), "limits", max_age_s=retention_s,
                   max_bytes=work_max_bytes),
        StreamSpec(STREAM_EVENTS, (f"{EVENTS}.>",), "limits", max_age_s=retention_s,
                   max_bytes=events_max_bytes, discard_new=False),
        StreamSpec(STREAM_DLQ, (f"{DEAD_LETTERS}.>",), "limits", max_age_s=retention_s),
        # The server's max-deliveries advisories, kept until a consumer dead-letters the
        # message they name: no live subscriber is needed when the server gives up.
        StreamSpec(STREAM_ADVISORIES, (f"{MAX_DELIVERIES}.>",), "workqueue",
                   max_age_s=retention_s),
    ]


def advisory_consumer(spec: ConsumerSpec) -> ConsumerSpec:
    """The durable that turns `spec`'s max-deliveries advisories into dead letters."""
    return ConsumerSpec(STREAM_ADVISORIES, f"dlq-{spec.durable}",
                        max_deliveries_advisory(spec.stream, spec.durable))


CONSUMER_TASKS = ConsumerSpec(STREAM_TASKS, "generator", TASKS)
CONSUMER_TURNS = ConsumerSpec(STREAM_TURNS, "generator-turns", TURNS)
CONSUMER_ATTEMPTS = ConsumerSpec(STREAM_ATTEMPTS, "judge-attempts", ATTEMPTS)
CONSUMER_EXEC = ConsumerSpec(STREAM_EXEC, "executor", EXEC_REQUESTS)
CONSUMER_EXEC_DONE = ConsumerSpec(STREAM_EXEC_DONE, "judge", EXEC_DONE)
CONSUMER_LEARNER = ConsumerSpec(STREAM_VERDICTS, "learner", f"{VERDICTS}.train")
CONSUMER_SAMPLER = ConsumerSpec(STREAM_VERDICTS, "sampler", f"{VERDICTS}.train")
"Train verdicts for the sampler's pass rates and staleness counters."
CONSUMER_EVALUATOR = ConsumerSpec(STREAM_VERDICTS, "evaluator", f"{VERDICTS}.eval")
"Eval verdicts: held-out pass rates."
CONSUMER_EVALUATOR_TRAIN = ConsumerSpec(STREAM_VERDICTS, "evaluator-train", f"{VERDICTS}.train")
"Train verdicts for the evaluator's training-reward trend."
