"""The wiring's own config sections: `[run]`, `[bus]`, `[actors]`, `[supervisor]`,
`[training]`, `[logging]` and `[autoscale]`.

Consumes nothing; declares typed, bounded sections on `bus.section.Section` that
`runtime.config.RunConfig` composes beside the packages' own (and the broker's `[auth]`).
It reads no file and starts nothing; the autoscaler that acts on `[autoscale]` is
`runtime.stack.autoscale`.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bus import subjects
from bus.section import Section
from runtime.broker.embedded import SYNC_INTERVAL

Count = Annotated[int, msgspec.Meta(ge=0, le=64)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]


class RunSection(Section):
    """The run itself, `[run]`: its name, where runs live, the seed."""

    name: str = "whet"
    "Run name, used in the run id."
    runs_dir: str = "runs"
    "Folder that holds one subfolder per run (relative to the working directory)."
    seed: int = 0
    ("Seed for every random choice the run makes: the tasks generated, the splits, the held-out "
     "pick, and (unless `sampling_seed` is set) the task draws and sampling.")
    sampling_seed: int | None = None
    ("Seed of the sampler's task draws and the generators' sampling; unset, `seed`. Set it to run "
     "the same tasks and held-out set again with other draws.")

    @property
    def draw_seed(self) -> int:
        """The seed of task draws and training samples: `sampling_seed`, else `seed`."""
        return self.seed if self.sampling_seed is None else self.sampling_seed


class BusConfig(Section):
    """The bus, `[bus]`: where the server is, and timeouts and limits of talking to it."""

    url: str = ""
    ("NATS URL, or a cluster's URLs comma separated (clients fail over between them); empty "
     "starts the embedded nats-server. WHET_NATS_URL overrides it.")
    request_timeout_s: Seconds = 5.0
    "Timeout of one request to the server."
    publish_deadline_s: Seconds = 120.0
    "How long a durable publish keeps retrying through an outage before failing."
    ack_wait_s: Seconds = 30.0
    "Redelivery timer of unacked work (kept alive while work is in progress)."
    max_deliver: Annotated[int, msgspec.Meta(ge=1, le=100)] = 5
    "Deliveries of one message before it is dead-lettered."
    duplicate_window_s: Seconds = 600.0
    "Window in which a repeated Nats-Msg-Id is stored once."
    max_ack_pending: Annotated[int, msgspec.Meta(ge=1)] = 4096
    "Most unacked messages per consumer, across all its instances."
    work_max_mb: Annotated[int, msgspec.Meta(ge=1)] = 256
    "Size cap of each of the five work streams; past it publishers wait (nothing is dropped)."
    retention_h: Annotated[float, msgspec.Meta(gt=0)] = 168.0
    "How long verdicts, events and dead letters are kept."
    verdicts_max_mb: Annotated[int, msgspec.Meta(ge=1)] = 1024
    "Size cap of the verdict stream (about 7 KB a verdict); when full, judges wait."
    events_max_mb: Annotated[int, msgspec.Meta(ge=1)] = 256
    "Size cap of the events stream; the oldest events go first."
    sync_interval: str = SYNC_INTERVAL
    ("How often the embedded server's JetStream flushes to disk: 'always' (an fsync per "
     "write: nothing acknowledged is lost to an OS crash or power loss, at a cost in "
     "throughput) or a duration such as '2m' (NATS's default; such a crash can lose what "
     "was acknowledged since the last flush). An external server's own config decides there "
     "(compose: WHET_NATS_SYNC_INTERVAL).")
    replicas: Literal[1, 3] = 1
    ("Copies of every work stream, the verdicts, the KV buckets and the weights object store: "
     "1, or 3 on a JetStream cluster of at least 3 nodes (a node may then die and nothing "
     "acknowledged is lost). 3 needs embedded_nodes = 3 or a url listing a cluster.")
    embedded_nodes: Literal[1, 3] = 1
    ("Nodes of the embedded server when no url is set: 3 starts a local cluster (three "
     "nats-server processes on 127.0.0.1, each with its own store), for replicas = 3 "
     "on one machine without Docker.")


class ActorsConfig(Section):
    """Which actors run, `[actors]`: instances per kind, extra kinds."""

    count: dict[str, Count] = {}
    "Instances per actor kind."
    target: dict[str, str] = {}
    "Extra actor kinds as 'module:function' (your own actors)."


class SupervisorConfig(Section):
    """The supervisor, `[supervisor]`: heartbeats, draining, restarts."""

    heartbeat_s: Seconds = 2.0
    "Seconds between heartbeats; three missed beats mark an actor dead."
    drain_s: Seconds = 10.0
    "Time an actor gets to finish in-flight work when stopped."
    restart_backoff_s: Seconds = 0.5
    "First delay before restarting a crashed actor; doubles per crash."
    restart_backoff_max_s: Seconds = 30.0
    "Longest restart delay."
    crash_loop_limit: Annotated[int, msgspec.Meta(ge=1, le=100)] = 3
    ("Crashes in a row before an instance is ever ready after which its kind counts as "
     "failing: the stack stops and says why. Crashes after readiness restart with backoff.")
    threads_per_actor: Annotated[int, msgspec.Meta(ge=1, le=64)] = 1
    "torch/BLAS threads per actor process, so actors do not fight over the cores."
    threads: dict[str, Annotated[int, msgspec.Meta(ge=1, le=64)]] = {}
    "Per-kind override of threads_per_actor, e.g. {learner = 2}."


class TrainingConfig(Section):
    """The training loop, `[training]`: sync or async, batch and group size, staleness."""

    mode: Literal["sync", "async"] = "async"
    "sync: generate a batch, train, repeat (on-policy). async: rolling, bounded staleness."
    batch_size: Annotated[int, msgspec.Meta(ge=1)] = 32
    "Attempts per learner update."
    group_size: Annotated[int, msgspec.Meta(ge=1, le=256)] = 4
    "Attempts per task (the GRPO group)."
    max_staleness: Annotated[int, msgspec.Meta(ge=0)] = 2
    "async: policy versions a sample may lag behind the learner. sync uses 0."
    max_steps: Annotated[int, msgspec.Meta(ge=0)] = 0
    "Stop the stack after this many learner steps (0: run until stopped)."
    zero_signal: Literal["drop", "refill", "keep"] = "drop"
    ("Groups whose rewards are all equal (every advantage zero). drop: consumed, not trained "
     "(trained anyway with learner.kl_coef > 0, whose KL term has a gradient there). keep: "
     "trained: no policy gradient, but their tokens count in the loss divisor. refill: "
     "dropped, and the batch waits for more groups until it holds batch_size members of "
     "groups with a signal (DAPO's dynamic sampling); the sampler admits a replacement for "
     "each group without one (`envs.admission.SignalRefunds`), and `refill_limit` bounds "
     "the wait.")
    refill_limit: Annotated[int, msgspec.Meta(ge=1, le=16)] = 4
    ("refill: most members one batch takes, zero-signal groups included, as a multiple of "
     "batch_size; a batch that reaches it trains on the groups with a signal it holds.")

    @property
    def staleness(self) -> int:
        """The staleness bound in force: 0 in sync mode."""
        return 0 if self.mode == "sync" else self.max_staleness

    @property
    def batch_most(self) -> int:
        """Most members one batch takes: batch_size * refill_limit with refill, else
        batch_size (a last group may overshoot either by less than group_size)."""
        return self.batch_size * (self.refill_limit if self.zero_signal == "refill" else 1)


class LoggingConfig(Section):
    """Logging, `[logging]`."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    "Lowest level written."


DEFAULT_QUEUES: dict[str, list[str]] = {
    kind: [f"{c.stream}/{c.durable}" for c in specs] for kind, specs in {
        "executor": [subjects.CONSUMER_EXEC],
        "generator": [subjects.CONSUMER_TASKS, subjects.CONSUMER_ROUNDS, subjects.CONSUMER_TURNS],
        "judge": [subjects.CONSUMER_ATTEMPTS, subjects.CONSUMER_EXEC_DONE],
    }.items()}
"Consumers ('STREAM/durable') whose backlog drives each kind, unless configured."


class KindPolicy(Section):
    """How one kind is autoscaled, `[autoscale.kinds.<kind>]`."""

    min: Count = 1
    "Fewest instances."
    max: Count = 4
    "Most instances."
    backlog_per_instance: Annotated[int, msgspec.Meta(ge=1)] = 16
    "Backlog (undelivered + unacked messages) one instance should carry."
    up_cooldown_s: Annotated[float, msgspec.Meta(ge=0)] = 10.0
    "Least time between two changes when scaling up."
    down_cooldown_s: Annotated[float, msgspec.Meta(ge=0)] = 60.0
    "Time the backlog must need fewer instances (and no change happen) before one goes."
    consumers: list[str] = []
    "Durable consumers ('STREAM/durable') whose backlog counts; empty: the kind's default."

    def __post_init__(self) -> None:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        for name in self.consumers:
            if name.count("/") != 1:
                raise ValueError(f"consumer {name!r}: expected 'STREAM/durable'")


class AutoscaleConfig(Section):
    """The autoscaler, `[autoscale]`."""

    interval_s: Annotated[float, msgspec.Meta(gt=0)] = 2.0
    "Seconds between two looks at the backlog."
    kinds: dict[str, KindPolicy] = {}
    "Policy of each autoscaled kind; kinds not named keep their configured count."

    def __post_init__(self) -> None:
        for kind, policy in self.kinds.items():
            if not policy.consumers and kind not in DEFAULT_QUEUES:
                raise ValueError(f"kind {kind!r} has no default queue; set its consumers, "
                                 f"e.g. consumers = [\"WHET_EXEC/executor\"]")

    def queues(self, kind: str) -> list[str]:
        return self.kinds[kind].consumers or DEFAULT_QUEUES[kind]
