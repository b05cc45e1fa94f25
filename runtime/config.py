"""Typed run configuration, loaded from `configs/*.toml` and validated at start.

Consumes a TOML (or resolved JSON) file and the environment (`WHET_NATS_URL` and the
credential variables); produces a `RunConfig`, or a `ConfigError` that names the file, the
key and what was expected. It does not start anything.

A file may name another with `extends = "other.toml"` (relative to itself); its tables are
merged over the other's, key by key.

Each package owns its sections (`sandbox.config`, `policy.config`, `judging.config`,
`envs.config`, `monitoring.config`, on `bus.section.Section`); this module composes them with
the wiring's own (`[run]`, `[bus]`, `[actors]`, `[supervisor]`, `[training]`, `[logging]`,
`runtime.auth`, `runtime.autoscale`) into `RunConfig`. No package imports `runtime/`; the
actors, which take the composed `RunConfig`, import only this module from it.
"""

from __future__ import annotations

import os
import re
import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from bus.errors import ConfigError
from bus.section import Section
from envs.config import EnvsConfig, EvaluatorConfig, SamplerConfig
from judging.config import JudgeConfig
from monitoring.config import MonitorConfig
from policy.config import GeneratorConfig, LearnerConfig, ModelConfig, TrainerConfig
from runtime.auth import AuthConfig, role_of
from runtime.autoscale import AutoscaleConfig
from runtime.embedded import SYNC_INTERVAL, sync_interval_problem
from sandbox.config import ExecutorConfig

Count = Annotated[int, msgspec.Meta(ge=0, le=64)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]


class RunSection(Section):
    name: str = "whet"
    "Run name, used in the run id."
    runs_dir: str = "runs"
    "Folder that holds one subfolder per run (relative to the working directory)."
    seed: int = 0
    "Seed for every random choice the run makes."


class BusConfig(Section):
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
    count: dict[str, Count] = {}
    "Instances per actor kind."
    target: dict[str, str] = {}
    "Extra actor kinds as 'module:function' (your own actors)."


class SupervisorConfig(Section):
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

    @property
    def staleness(self) -> int:
        """The staleness bound in force: 0 in sync mode."""
        return 0 if self.mode == "sync" else self.max_staleness


class LoggingConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    "Lowest level written."


class RunConfig(Section):
    run: RunSection = RunSection()
    bus: BusConfig = BusConfig()
    actors: ActorsConfig = ActorsConfig()
    supervisor: SupervisorConfig = SupervisorConfig()
    logging: LoggingConfig = LoggingConfig()
    training: TrainingConfig = TrainingConfig()
    auth: AuthConfig = AuthConfig()
    monitor: MonitorConfig = MonitorConfig()
    autoscale: AutoscaleConfig = AutoscaleConfig()
    model: ModelConfig = ModelConfig()
    generator: GeneratorConfig = GeneratorConfig()
    learner: LearnerConfig = LearnerConfig()
    executor: ExecutorConfig = ExecutorConfig()
    envs: EnvsConfig = EnvsConfig()
    sampler: SamplerConfig = SamplerConfig()
    evaluator: EvaluatorConfig = EvaluatorConfig()
    judge: JudgeConfig = JudgeConfig()

    @property
    def trainer(self) -> TrainerConfig:
        """What the learner's ranks read: the model, the learner and the training sampling."""
        return TrainerConfig(model=self.model, learner=self.learner,
                             sampling=self.generator.sampling)


def load(path: str | Path) -> RunConfig:
    """Load, merge (`extends`), validate and return the config at `path`."""
    path = Path(path)
    data = _read(path, seen=())
    cfg = _apply_env(_convert(data, str(path)))
    _check_replicas(cfg, str(path))
    return cfg


def _check_replicas(cfg: RunConfig, source: str) -> None:
    if cfg.bus.replicas > 1 and not cfg.bus.url and cfg.bus.embedded_nodes < cfg.bus.replicas:
        raise ConfigError(source, "bus.replicas",
                          f"{cfg.bus.replicas} replicas need a cluster of at least "
                          f"{cfg.bus.replicas} nodes, and the embedded server is one: set "
                          f"[bus] embedded_nodes = 3, or a url listing a cluster's nodes "
                          f"(comma separated), or replicas = 1")


def _read(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    if path.resolve() in seen:
        raise ConfigError(str(path), "extends", "files extend each other in a loop")
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror}") from None
    try:
        data = msgspec.json.decode(text) if path.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, msgspec.DecodeError) as exc:
        raise ConfigError(str(path), "", f"not valid {path.suffix[1:].upper()}: {exc}") from None
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(str(path), "extends", f"expected a file name, got {base!r}")
    return _merge(_read(path.parent / base, seen + (path.resolve(),)), data)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)


def _convert(data: dict[str, Any], source: str) -> RunConfig:
    try:
        cfg = msgspec.convert(data, RunConfig, strict=False)
    except msgspec.ValidationError as exc:
        match = _AT.match(str(exc))
        assert match is not None
        key = (match["path"] or "").replace("[...]", ".<key>").lstrip(".")
        key = key.replace("[", ".").replace("]", "").replace("'", "").replace('"', "")
        what = match["what"]
        unknown = re.match(r"Object contains unknown field `(.+)`", what)
        if unknown:
            key, what = ".".join(filter(None, [key, unknown[1]])), "unknown key"
        elif what.startswith("Invalid enum value"):
            what += f"; expected one of {_choices(key)}"
        raise ConfigError(source, key, what) from None
    _check_kinds(cfg, source)
    _check_eval_sampling(cfg, source)
    _check_tls(cfg, source)
    _check_learner_ranks(cfg, source)
    problem = sync_interval_problem(cfg.bus.sync_interval)
    if problem:
        raise ConfigError(source, "bus.sync_interval", problem)
    return cfg


def _choices(key: str) -> list[str]:
    """The allowed values of the Literal field at dotted `key` of RunConfig."""
    cls: Any = RunConfig
    for part in key.split("."):
        if part == "<key>" or part.isdigit():  # an item of a dict or list
            cls = _element(cls)
            continue
        try:
            hints = typing.get_type_hints(cls)
        except TypeError:  # not a section: nothing to list
            return []
        if part not in hints:
            return []
        cls = hints[part]
    return list(typing.get_args(_element(cls) if typing.get_origin(cls) in (list, dict) else cls))


def _element(cls: Any) -> Any:
    """The value type inside dict[..., V], list[V] or V | None."""
    args = [a for a in typing.get_args(cls) if a is not type(None)]
    return args[-1] if args else cls


def _check_kinds(cfg: RunConfig, source: str) -> None:
    from actors import KINDS  # the registry of built-in kinds

    known = set(KINDS) | set(cfg.actors.target)
    for section, kinds in (("actors.count", cfg.actors.count), ("autoscale.kinds", cfg.autoscale.kinds)):
        for kind in kinds:
            if kind not in known:
                raise ConfigError(source, f"{section}.{kind}",
                                  f"unknown actor kind; expected one of {sorted(known)}")
    for kind, target in cfg.actors.target.items():
        if ":" not in target:
            raise ConfigError(source, f"actors.target.{kind}",
                              f"expected 'module:function', got {target!r}")
    for kind in {*cfg.actors.count, *cfg.autoscale.kinds} if cfg.auth.enabled else ():
        try:
            role_of(kind, cfg.auth)
        except ValueError as exc:
            raise ConfigError(source, f"auth.roles.{kind}", str(exc)) from None


def _check_tls(cfg: RunConfig, source: str) -> None:
    if cfg.auth.tls and not cfg.auth.enabled:
        raise ConfigError(source, "auth.tls", "TLS with client certificates needs the per-role "
                          "users too: set [auth] enabled = true")
    if cfg.auth.tls and cfg.auth.tls_cert_file:
        raise ConfigError(source, "auth.tls_cert_file", "set either tls = true (whetstone's "
                          "own CA and client certificates) or tls_cert_file, not both")


def _check_learner_ranks(cfg: RunConfig, source: str) -> None:
    lc, count = cfg.learner, cfg.actors.count.get("learner_rank")
    if count and lc.ranks != "bus":
        raise ConfigError(source, "actors.count.learner_rank",
                          'learner_rank actors need [learner] ranks = "bus" (with "children", '
                          "the learner starts its other ranks itself)")
    if count is not None and lc.ranks == "bus" and count != lc.world_size - 1:
        raise ConfigError(source, "actors.count.learner_rank",
                          f"{count} ranks besides rank 0, but [learner] world_size = "
                          f"{lc.world_size} needs {lc.world_size - 1} (or leave it out and run "
                          "them elsewhere)")


def _check_eval_sampling(cfg: RunConfig, source: str) -> None:
    k = cfg.evaluator.samples_per_task
    if k > 1 and cfg.generator.eval_sampling.temperature == 0:
        raise ConfigError(source, "generator.eval_sampling.temperature",
                          f"evaluator.samples_per_task = {k} needs a temperature above 0: "
                          "greedy decoding gives the same attempt every time")


def _apply_env(cfg: RunConfig) -> RunConfig:
    url = os.environ.get("WHET_NATS_URL")
    if url:
        cfg = msgspec.structs.replace(cfg, bus=msgspec.structs.replace(cfg.bus, url=url))
    return cfg


def dump(cfg: RunConfig) -> bytes:
    """The resolved config as indented JSON (loadable again with `load`)."""
    return msgspec.json.format(msgspec.json.encode(cfg), indent=2)
