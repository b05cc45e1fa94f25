"""Typed run configuration, loaded from `configs/*.toml` and validated at start.

Consumes a TOML (or resolved JSON) file and the environment (`WHET_NATS_URL` and the
credential variables); produces a `RunConfig`, or a `ConfigError` that names the file, the
key and what was expected. It does not start anything. A file may name another with
`extends = "other.toml"` (relative to itself); its tables are merged over the other's.

`RunConfig` composes each package's own sections (`sandbox.config`, `policy.config`,
`judging.config`, `envs.config`, `monitoring.config`), the broker's `[auth]` and the wiring's
own (`runtime.sections`). No package imports `runtime/`; the actors import only this module.
"""

from __future__ import annotations

import os
import re
import tomllib
import typing
from pathlib import Path
from typing import Any

import msgspec

from bus.errors import ConfigError
from bus.section import Section
from envs.config import EnvsConfig, EvaluatorConfig, SamplerConfig
from judging.config import JudgeConfig
from monitoring.config import MonitorConfig
from policy.config import GeneratorConfig, LearnerConfig, ModelConfig, TrainerConfig, WarmstartConfig
from runtime.broker.auth import AuthConfig, role_of
from runtime.broker.embedded import sync_interval_problem
from runtime.kinds import KINDS
from runtime.sections import (ActorsConfig, AutoscaleConfig, BusConfig, LoggingConfig, RunSection,
                              SupervisorConfig, TrainingConfig)
from sandbox.config import ExecutorConfig


class RunConfig(Section):
    """The whole run's config: each package's section, composed; `load` reads it from TOML."""

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
    warmstart: WarmstartConfig = WarmstartConfig()

    @property
    def trainer(self) -> TrainerConfig:
        """What the learner's ranks read: the model, the learner, the training sampling and
        the batch size."""
        return TrainerConfig(model=self.model, learner=self.learner,
                             sampling=self.generator.sampling,
                             batch_size=self.training.batch_size)


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
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise ConfigError(str(path), "", f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} on line "
                          f"{line}): TOML files are UTF-8; save it as UTF-8") from None
    try:
        data = msgspec.json.decode(text) if path.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, msgspec.DecodeError) as exc:
        raise ConfigError(str(path), "", f"not valid {path.suffix[1:].upper()}: {exc}") from None
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(str(path), "extends", f"expected a file name, got {base!r}")
    return merge(_read(path.parent / base, seen + (path.resolve(),)), data)


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, tables merged key by key (as `extends` merges)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
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
    _check_lora(cfg, source)
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


UNTARGETABLE = ("embed_tokens", "lm_head")
"Layers LoRA may not adapt: the embedding, and the output head tied to it."


def _check_lora(cfg: RunConfig, source: str) -> None:
    lora = cfg.learner.lora
    if lora is None:
        return
    if cfg.learner.zero_stage == 3:
        raise ConfigError(source, "learner.zero_stage",
                          "[learner] lora works with ZeRO stages 0-2 (the adapters are small: "
                          "stage 3 partitions nothing worth it); set zero_stage = 2 or lower")
    for name in lora.target_modules:
        if not name or name.split(".")[-1] in UNTARGETABLE:
            raise ConfigError(source, "learner.lora.target_modules",
                              f"{name!r} cannot take an adapter (the embedding and lm_head are "
                              "tied); name linear layers of the decoder blocks, e.g. q_proj")


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
