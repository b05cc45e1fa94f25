"""Control messages: weight versions, learner steps and ranks, heartbeats, failures, scale
targets, events and dead letters.

Consumes nothing; declares what actors publish about themselves and the run. No I/O.
"""

from __future__ import annotations

from typing import Any, Literal

from bus.messages.base import Message


# --- weights, actors, operations ---------------------------------------------------------


class WeightVersion(Message, tag="whet.weights.v1"):
    """Learner to generators (through KV): a published policy version and where its weights are."""

    version: int
    "Policy version, increasing from 0."
    object_name: str
    "Name of the weights object in the weights object store; '' for the initial weights."
    size: int = 0
    "Bytes of the weights object."
    sha256: str = ""
    "Hex SHA-256 of the weights object."
    dtype: str = "bfloat16"
    "Dtype of the stored tensors."
    step: int = 0
    ("Learner steps (batches consumed, trained or not) behind these weights; after a learner "
     "restart, those of its checkpoint. The sampler's admission budget counts them.")
    samples: int = 0
    "Samples trained on so far."
    created_at: float = 0.0
    "Unix time of publication."
    weights: str = "full"
    ("What the object holds: 'full' (every weight) or 'lora' (only LoRA adapter weights, "
     "which a generator adds to the `base` it holds; the object's header has rank and alpha).")
    base: str = ""
    "lora: the base model the adapter applies to (the learner's [model] name or path)."


class StepRecord(Message, tag="whet.step.v1"):
    """Learner to progress (`whet up`'s metrics, its stop at `max_steps`) and anyone watching,
    through KV whet-run (`learner.step.<step>`, see `bus.subjects.step_key`): one learner step,
    written once it is done. A step redone after a restart from a checkpoint replaces the
    record under its key (its `trained_at` differs). The `learner.step_completed` event
    carries the same figures, and the verdict ids, for people and `whet tail`."""

    step: int
    "Learner steps (batches consumed, trained or not) so far, this one included."
    policy_version: int
    "Policy version after this step (published, or due with the next publish)."
    trained_at: float
    "Unix time the update finished; with `step`, tells a redone step from a repeated record."
    groups: int = 0
    "Groups in the batch."
    samples: int = 0
    "Samples (verdicts) trained on in this step; the event names them."
    samples_total: int = 0
    "Samples trained on so far."
    left_out: dict[str, int] = {}
    "Verdicts consumed without training, by reason: 'dropped', 'stale', 'no_signal'."
    mean_reward: float | None = None
    "Mean reward of the batch's judged attempts (None if none)."
    pass_rate: float | None = None
    "Share of those that passed."
    hacks: int = 0
    "Attempts judged as hacks."
    staleness_mean: float | None = None
    "Mean versions the trained samples lagged behind the learner."
    staleness_max: int | None = None
    "Most versions a trained sample lagged."
    stale_rejected: int = 0
    "Samples rejected as older than the staleness bound."
    dropped: int = 0
    "Verdicts the judge dropped (infrastructure), never trained."
    no_signal: int = 0
    "Samples left out because their group's advantages were all zero."
    duplicates: int = 0
    "Redelivered verdicts skipped so far."
    late: int = 0
    "Group members that arrived after their group was trained, so far."
    step_s: float = 0.0
    "Seconds this step took: assemble, train, hold for eval, publish, checkpoint."
    idle_frac: float = 0.0
    "Share of the learner's time so far spent waiting for verdicts."
    held_for_eval_s: float = 0.0
    "Seconds held for held-out rounds so far (neither idle nor busy)."
    loss: float | None = None
    "Policy-gradient loss (token mean); None when nothing was trained."
    kl: float | None = None
    "KL to the reference policy (token mean), when `kl_coef` is above 0."
    clip_frac: float | None = None
    "Share of tokens whose ratio was clipped."
    masked_frac: float | None = None
    "Share of tokens masked out by the off-policy correction (IcePop)."
    is_weight: float | None = None
    "Mean importance weight of the tokens."
    behav_gap: float | None = None
    "Mean |log pi_prox - log pi_behav| of the tokens."
    grad_norm: float | None = None
    "Global gradient norm after the update (-1 if not finite)."
    tokens: float | None = None
    "Completion tokens trained on."
    train_s: float | None = None
    "Seconds of the DeepSpeed part of the step."
    optimizer_steps: float | None = None
    "Optimizer steps so far."


class LearnerRendezvous(Message, tag="whet.learner_rendezvous.v1"):
    """Learner rank 0 to the learner's other ranks (KV whet-run `learner.rendezvous`, see
    `policy.rendezvous`): where this generation of the learner's process group meets. Rank 0
    writes a new generation each time it starts, once its store listens; a rank joins each
    generation at most once, and a rank that joined an older one leaves when it sees it."""

    generation: int
    "Counts rank 0's starts on this bus; the record of a newer start has a higher one."
    host: str
    "Address the other ranks reach rank 0's c10d store at (their MASTER_ADDR)."
    port: int
    "TCP port of that store (their MASTER_PORT)."
    world_size: int
    "Ranks in the group, rank 0 included."
    instance: str = ""
    "Rank 0's actor instance."
    published_at: float = 0.0
    "Unix time rank 0 wrote this record."
    kind: str = ""
    "Rank 0's actor kind (with `instance`, the key of its heartbeats)."


class LearnerRankClaim(Message, tag="whet.learner_rank.v1"):
    """A learner rank other than 0 to rank 0 (KV whet-run `learner.rank.<rank>`): the
    generation this process joined, or, while it waits for a newer one, the last one taken
    before it. Rank 0 leaves its generation when another process claims one of its ranks
    (the process it met is gone), so the pair meets again under a new generation."""

    rank: int
    "The rank claimed."
    generation: int
    "Generation joined (state 'joined'), or the newest already taken (state 'waiting')."
    state: Literal["waiting", "joined"]
    "waiting: for a generation newer than `generation`; joined: it took `generation`."
    incarnation: str
    "Random id of this process, so a restarted rank differs from the one before."
    instance: str = ""
    "Actor instance of the rank."
    host: str = ""
    "Host name of the rank."
    at: float = 0.0
    "Unix time of the claim."
    kind: str = ""
    "Actor kind of the rank (with `instance`, the key of its heartbeats)."


MISSED_BEATS = 3
"Beats a process may miss before it counts as dead (`Heartbeat.silence_limit_s`)."


class Heartbeat(Message, tag="whet.heartbeat.v1"):
    """Every actor to the registry (KV), every few seconds."""

    kind: str
    "Actor kind (sampler, generator, ...)."
    instance: str
    "Instance id, unique within the run."
    pid: int
    "OS process id."
    host: str
    "Host name."
    state: Literal["starting", "ready", "stopping", "stopped"]
    "Lifecycle state."
    started_at: float
    "Unix time the actor started."
    beat_at: float
    "Unix time of this beat."
    interval_s: float = 2.0
    "Seconds between beats; a registry entry older than three intervals is dead."
    processed: int = 0
    "Units of work handled since start."
    in_flight: int = 0
    "Units of work held now."
    policy_version: int = -1
    "Policy version the actor runs, where it runs one."
    stats: dict[str, float] = {}
    "Actor-specific gauges (tokens/s, jobs/s, step time)."
    ready_at: float = 0.0
    """Unix time this process became ready (its `run` signalled it started); 0 until then.
    The supervisor tells a crash before readiness (a crash loop) from one after by it."""

    @property
    def silence_limit_s(self) -> float:
        """Seconds without a beat after which this process counts as dead: `whet status`,
        the live line and the supervisor's `actor.unresponsive` all use this one rule."""
        return MISSED_BEATS * self.interval_s


class ActorFailure(Message, tag="whet.actor_failure.v1"):
    """Supervisor to `whet status` (KV whet-run `supervisor.failing.<kind>`): a kind that
    crashed again and again before it was ready, which stopped the stack."""

    kind: str
    "Actor kind."
    instance: str
    "The instance whose crashes were counted."
    failures: int
    "Crashes in a row before readiness."
    cause: str
    "Last line of the last crash's exception (or its exit code)."
    log: str = ""
    "File holding the whole traceback."
    at: float = 0.0
    "Unix time of the last crash."


class ScaleTarget(Message, tag="whet.scale.v1"):
    """CLI to supervisor (through KV): desired instance count of one actor kind."""

    kind: str
    "Actor kind."
    count: int
    "Desired instances."
    requested_at: float = 0.0
    "Unix time of the request."


class Event(Message, tag="whet.event.v1"):
    """Every process to the events stream: one structured log line."""

    ts: float
    "Unix time."
    level: str
    "debug, info, warning, error or critical."
    event: str
    "Stable dotted past-tense name, e.g. 'actor.started'."
    actor: str = ""
    "Actor kind, or 'cli'/'supervisor'."
    instance: str = ""
    "Instance id."
    run_id: str = ""
    "Run the event belongs to."
    fields: dict[str, Any] = {}
    "Everything else bound to the event."


class DeadLetter(Message, tag="whet.dead_letter.v1"):
    """Any consumer to the dead-letter stream: a message that cannot be processed, and why."""

    subject: str
    "Subject the message arrived on."
    stream: str
    "Stream it was stored in."
    stream_seq: int
    "Its sequence number in that stream."
    consumer: str
    "Durable consumer that gave up on it."
    reason: str
    "Short machine-readable reason: malformed, schema_mismatch, max_deliveries, handler_error."
    error: str
    "Human-readable detail naming what was wrong and where."
    payload: bytes
    ("The original payload, unchanged; only its first bytes when it was too large for a letter "
     "to hold it (`payload_bytes` then says how large it was).")
    deliveries: int = 0
    "Times it was delivered."
    instance: str = ""
    "Instance that dead-lettered it."
    at: float = 0.0
    "Unix time."
    payload_bytes: int = 0
    "Size of the original payload; more than len(payload) when it was cut to fit the server."
    payload_sha256: str = ""
    "sha256 of the original payload, so a cut letter still names exactly what it held."
