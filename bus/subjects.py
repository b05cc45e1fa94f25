"""Every subject, stream, consumer and bucket name on the bus, built here and nowhere else.

Consumes plain values (actor kind, instance id, level); produces subject strings and the
declarative topology (`StreamSpec`, `ConsumerSpec`) that `bus.nats_bus` creates on the
server. Does no I/O.

Subjects are lowercase, dotted and versioned: `whet.v1.<what>[.<detail>]`. A breaking change
to a message gets a new version token here.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

PREFIX = "whet.v1"

TASKS = f"{PREFIX}.tasks"
"Sampler to generators: `TaskAssignment`."
ROUNDS = f"{PREFIX}.rounds"
("Evaluator to generators: a held-out round's `TaskAssignment`s, on a stream of their own so a "
 "round never queues ahead of training work.")
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
TRIALS = f"{PREFIX}.trials"
"Recorder to trace store: `Trial`, as `whet.v1.trials.<run>.<trial>` (one subject per trial)."

BUCKET_POLICY = "whet-policy"
"KV: key `current` holds the latest `WeightVersion`; `version.<n>` (`version_key`) each one's."
BUCKET_ACTORS = "whet-actors"
"KV: key `<kind>.<instance>` holds that actor's latest `Heartbeat`."
BUCKET_RUN = "whet-run"
("KV: run metadata, `scale.<kind>` holding a `ScaleTarget`, the sampler's and evaluator's "
 "state, one `EvalRound` per evaluated version and one `StepRecord` per learner step.")
BUCKET_WEIGHTS = "whet-weights"
"Object store: one object per published weight version."

KEY_POLICY = "current"


_VERSION = "version."
VERSION_KEYS = _VERSION + ">"
"whet-policy: every version's record (`version_key`), written by the learner."


def version_key(version: int) -> str:
    """whet-policy key of the record of `version`: where its weights are, even when a later
    version is current (a renumbered version names an older version's object)."""
    return f"{_VERSION}{version:08d}"


KEY_SAMPLER_STATE = "sampler.state"
"whet-run: the sampler's admission counters (`SamplerState`)."
KEY_SAMPLER_RATES = "sampler.rates"
"whet-run: the sampler's per-task pass rates, in chunks `sampler.rates.<n>` (msgpack)."
KEY_EVALUATOR_STATE = "evaluator.state"
"whet-run: the evaluator's last round and history (`EvaluatorState`)."
KEY_METRICS = "monitor.metrics"
"whet-run: the monitor's latest `MetricsSnapshot`."
KEY_EVAL_ROUNDS = "evaluator.round.>"
"whet-run: every `EvalRound` (a pattern, for watching them all; see `eval_round_key`)."
KEY_LEARNER_STEPS = "learner.step.>"
"whet-run: every learner `StepRecord` (a pattern, for watching them all; see `step_key`)."

KEY_LEARNER_RENDEZVOUS = "learner.rendezvous"
"whet-run: where the learner's ranks meet (`LearnerRendezvous`, written by rank 0)."
KEY_LEARNER_RANKS = "learner.rank.*"
"whet-run: every learner rank's `LearnerRankClaim` (a pattern; see `rank_key`)."

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


def trial_token(trial_id: str) -> str:
    """One subject token naming a trial: readable, and unique even where `token` folds two
    ids together (case, dots), thanks to a short hash of the exact id."""
    digest = hashlib.sha256(trial_id.encode()).hexdigest()[:10]
    return f"{token(trial_id)[:100]}-{digest}"


def trial_subject(run_id: str, trial_id: str) -> str:
    """Subject of one trial record."""
    return f"{TRIALS}.{token(run_id)}.{trial_token(trial_id)}"


def trial_filter(run_id: str | None = None, trial_id: str | None = None) -> str:
    """Filter for the trials of one run, one trial in any run, or everything."""
    run = token(run_id) if run_id else "*"
    return f"{TRIALS}.{run}.{trial_token(trial_id)}" if trial_id else f"{TRIALS}.{run}.>"


INBOX = "_INBOX"


def inbox_prefix(user: str) -> str:
    """Reply-subject prefix of a client logged in as `user`: a role reads only its own replies."""
    return f"{INBOX}.{token(user)}" if user else INBOX


def kv_subject(bucket: str, key: str) -> str:
    """Subject a put of `key` in KV `bucket` is published on (a pattern if `key` has wildcards)."""
    return f"$KV.{bucket}.{key}"


def kv_stream(bucket: str) -> str:
    """Stream that backs KV `bucket`."""
    return f"KV_{bucket}"


def object_subjects(bucket: str) -> str:
    """Subjects of every chunk and metadata record of object-store `bucket`."""
    return f"$O.{bucket}.>"


def object_stream(bucket: str) -> str:
    """Stream that backs object-store `bucket`."""
    return f"OBJ_{bucket}"


def actor_key(kind: str, instance: str) -> str:
    """KV key of an actor's heartbeat."""
    return f"{token(kind)}.{token(instance)}"


def actor_keys(kind: str) -> str:
    """KV key pattern of every heartbeat of an actor kind."""
    return f"{token(kind)}.*"


def gate_key(owner: str, digest: str) -> str:
    """whet-run key of one task's intake gate report (JSON), kept under its owner's prefix
    (`sampler.gate.<digest>`) so the owner's write grant covers it."""
    return f"{token(owner)}.gate.{digest}"


FAILING_PREFIX = "supervisor.failing."
"whet-run: `ActorFailure` records of kinds whose crash loop stopped the stack."


def failing_key(kind: str) -> str:
    """whet-run key of a kind's `ActorFailure`."""
    return f"{FAILING_PREFIX}{token(kind)}"


def eval_round_key(round_version: int, version: int) -> str:
    """whet-run key of the held-out result of policy `version` in the round for
    `round_version`; zero-padded, so keys sort in round order."""
    return f"evaluator.round.{round_version:06d}.{version:06d}"


def eval_round_prefix(round_version: int) -> str:
    """whet-run key prefix of every result of the round for `round_version`."""
    return f"evaluator.round.{round_version:06d}."


def rank_key(rank: int) -> str:
    """whet-run key of the `LearnerRankClaim` of learner rank `rank` (1 and up)."""
    return f"learner.rank.{rank}"


def step_key(step: int) -> str:
    """whet-run key of the `StepRecord` of learner step `step`: one key per step, so a
    watcher that starts (or renews its watch) late still reads every step, and a step redone
    after a learner restart replaces its own record; zero-padded, so keys sort by step."""
    return f"learner.step.{step:08d}"


def scale_key(kind: str) -> str:
    """KV key of an actor kind's desired count."""
    return f"scale.{token(kind)}"


MAX_DELIVERIES = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"


def max_deliveries_advisory(stream: str, consumer: str) -> str:
    """Server advisory published when a message of `consumer` hits max_deliver."""
    return f"{MAX_DELIVERIES}.{stream}.{consumer}"


JS_API = "$JS.API"


SESSION_OPEN = f"{PREFIX}.session.open"
"Core request/reply: open a tool episode's workspace on any executor (queue group below)."
SESSION_QUEUE = "executors"
"Queue group of the executors answering SESSION_OPEN."


def session_subject(instance: str) -> str:
    """Core request/reply subject of one executor's sessions (calls and close)."""
    return f"{PREFIX}.session.i.{token(instance)}"


SESSIONS_ALL = f"{PREFIX}.session.>"


def next_messages(stream: str, durable: str) -> str:
    """JetStream API subject a pull consumer's requests for more messages go to."""
    return f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.{durable}"


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
    max_msgs_per_subject: int = -1
    "Most messages kept per subject (-1: no limit); 1 keeps only the latest."
    cap_key: str = ""
    "The config key that sets max_bytes, named when the server cannot reserve it."


@dataclass(frozen=True)
class ConsumerSpec:
    """A durable pull consumer one actor kind reads from."""

    stream: str
    durable: str
    filter_subject: str


STREAM_TASKS = "WHET_TASKS"
STREAM_ROUNDS = "WHET_ROUNDS"
STREAM_TURNS = "WHET_TURNS"
STREAM_ATTEMPTS = "WHET_ATTEMPTS"
STREAM_EXEC = "WHET_EXEC"
STREAM_EXEC_DONE = "WHET_EXEC_DONE"
STREAM_VERDICTS = "WHET_VERDICTS"
STREAM_EVENTS = "WHET_EVENTS"
STREAM_DLQ = "WHET_DLQ"
STREAM_ADVISORIES = "WHET_ADVISORIES"
STREAM_TRIALS = "WHET_TRIALS"
WORK_STREAMS = [STREAM_TASKS, STREAM_ROUNDS, STREAM_TURNS, STREAM_ATTEMPTS, STREAM_EXEC,
                STREAM_EXEC_DONE, STREAM_VERDICTS, STREAM_DLQ]
"The streams work flows through, as `whet status`, the monitor and role grants observe them."


def streams(*, work_max_bytes: int, retention_s: float, events_max_bytes: int,
            verdicts_max_bytes: int = -1, trials_max_age_s: float = 0.0,
            trials_max_bytes: int = -1) -> list[StreamSpec]:
    """The streams whetstone needs, sized from config.

    JetStream reserves each stream's max_bytes against its file store when the stream is
    created, so the caps together must fit the server's store (by default 75% of the free
    disk where it stores), not just the data written.
    """
    work = dict(max_bytes=work_max_bytes, cap_key="[bus] work_max_mb")
    return [
        StreamSpec(STREAM_TASKS, (TASKS,), "workqueue", **work),
        StreamSpec(STREAM_ROUNDS, (ROUNDS,), "workqueue", **work),
        StreamSpec(STREAM_TURNS, (TURNS,), "workqueue", **work),
        StreamSpec(STREAM_ATTEMPTS, (ATTEMPTS,), "workqueue", **work),
        StreamSpec(STREAM_EXEC, (EXEC_REQUESTS,), "workqueue", **work),
        StreamSpec(STREAM_EXEC_DONE, (EXEC_DONE,), "workqueue", **work),
        # Verdicts are kept (limits retention) so traces and audits can read them after the
        # learner has acked; discard_new means a full stream refuses, never drops, a verdict:
        # the judge then purges what every reader has acked (bus.nats_reclaim) and retries.
        StreamSpec(STREAM_VERDICTS, (f"{VERDICTS}.>",), "limits", max_age_s=retention_s,
                   max_bytes=verdicts_max_bytes, cap_key="[bus] verdicts_max_mb"),
        StreamSpec(STREAM_EVENTS, (f"{EVENTS}.>",), "limits", max_age_s=retention_s,
                   max_bytes=events_max_bytes, discard_new=False,
                   cap_key="[bus] events_max_mb"),
        StreamSpec(STREAM_DLQ, (f"{DEAD_LETTERS}.>",), "limits", max_age_s=retention_s),
        # The server's max-deliveries advisories, kept until a consumer dead-letters the
        # message they name: no live subscriber is needed when the server gives up.
        StreamSpec(STREAM_ADVISORIES, (f"{MAX_DELIVERIES}.>",), "workqueue",
                   max_age_s=retention_s),
        # One record per trial: a re-recorded verdict replaces its record, and the oldest
        # trials go first when the store is full.
        StreamSpec(STREAM_TRIALS, (f"{TRIALS}.>",), "limits", max_age_s=trials_max_age_s,
                   max_bytes=trials_max_bytes, discard_new=False, max_msgs_per_subject=1,
                   cap_key="[monitor] trials_max_mb"),
    ]


def advisory_consumer(spec: ConsumerSpec) -> ConsumerSpec:
    """The durable that turns `spec`'s max-deliveries advisories into dead letters."""
    return ConsumerSpec(STREAM_ADVISORIES, f"dlq-{spec.durable}",
                        max_deliveries_advisory(spec.stream, spec.durable))


CONSUMER_TASKS = ConsumerSpec(STREAM_TASKS, "generator", TASKS)
CONSUMER_ROUNDS = ConsumerSpec(STREAM_ROUNDS, "generator-rounds", ROUNDS)
"Held-out round assignments, read beside training work (`actors.generator`)."
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
CONSUMER_MONITOR_TRAIN = ConsumerSpec(STREAM_VERDICTS, "monitor-train", f"{VERDICTS}.train")
CONSUMER_MONITOR_EVAL = ConsumerSpec(STREAM_VERDICTS, "monitor-eval", f"{VERDICTS}.eval")
