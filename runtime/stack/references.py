"""Preflight of the names a config refers to: each one resolved before anything starts.

Consumes a `RunConfig`; produces `Problem`s for an environment that does not exist
or will not load (`[envs.use.<name>]`: built-in name, `target` module and attribute, task
`file`, `verifiers` module), a training-mix domain no enabled environment provides, and an
extra actor kind (`[actors.target]`) whose module or function is missing. Each names the key as
the user wrote it and the fix. It imports environment and actor modules (as the actors would)
and starts nothing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from bus.errors import ConfigError
from runtime.config import RunConfig
from runtime.stack.problem import Problem


def reference_problems(cfg: RunConfig) -> list[Problem]:
    """Every name in `cfg` that does not resolve, one `Problem` each."""
    return [*_environment_problems(cfg), *_mix_problems(cfg), *_actor_problems(cfg)]


def _problem(what: str, where: str, fix: str) -> Problem:
    return Problem(what, where, fix)


def _environment_problems(cfg: RunConfig) -> list:
    from envs.registry import BUILTIN, enabled, resolve

    out = []
    for name, entry in enabled(cfg.envs.use).items():
        where = f"envs.use.{name}"
        if entry.file:
            if not Path(entry.file).is_file():
                out.append(_problem(f"the task file {entry.file} does not exist", f"{where}.file",
                                    "point file at a JSONL file of tasks (whet tasks check FILE "
                                    "checks one)"))
            continue
        if entry.verifiers:
            if importlib.util.find_spec(entry.verifiers.split(":")[0]) is None:
                out.append(_problem(f"no module {entry.verifiers!r} to load the taskset from",
                                    f"{where}.verifiers", "pip install the taskset's package, or "
                                    "fix the module name"))
            continue
        if not entry.target and name not in BUILTIN:
            out.append(_problem(f"no environment named {name!r}", where,
                                f"use a built-in ({', '.join(sorted(BUILTIN))}), or set "
                                f"{where}.target = 'module:ATTRIBUTE' or {where}.file"))
            continue
        try:
            resolve(name, entry)
        except ConfigError as exc:
            out.append(_problem(exc.problem, f"{where}.target",
                                "point target at 'module:ATTRIBUTE' of an envs.Environment"))
    return out


def _mix_problems(cfg: RunConfig) -> list:
    from envs.registry import BUILTIN, enabled, resolve

    domains = set()
    for name, entry in enabled(cfg.envs.use).items():
        try:
            domains.add(resolve(name, entry).domain)
        except (ConfigError, ImportError):
            continue  # named by _environment_problems
        if entry.file:
            domains.add(name)
    known = domains or set(BUILTIN)
    out = []
    for domain, share in cfg.envs.mix.items():
        if share > 0 and domain not in domains:
            out.append(_problem(f"the training mix gives domain {domain!r} a share of {share}, "
                                "but no enabled environment provides it", f"envs.mix.{domain}",
                                f"enable an environment of that domain, or set it to 0 "
                                f"(domains in use: {', '.join(sorted(known))})"))
    return out


def _actor_problems(cfg: RunConfig) -> list:
    from runtime.stack.actor import resolve_target  # the path an actor's process takes

    out = []
    for kind, target in cfg.actors.target.items():
        where = f"actors.target.{kind}"
        module, _, function = target.partition(":")
        try:
            found = resolve_target(kind, cfg)
        except ModuleNotFoundError as exc:
            what = (f"no module {module!r} for actor kind {kind!r}" if exc.name == module
                    else f"module {module!r} fails to import: {exc}")
            out.append(_problem(what, where, "write 'module:function' of an importable module "
                                "(on PYTHONPATH)"))
            continue
        except (AttributeError, ValueError):
            found = None
        except Exception as exc:  # noqa: BLE001 - the user's module failing to import is the finding
            out.append(_problem(f"module {module!r} fails to import: {type(exc).__name__}: {exc}",
                                where, "fix the module so that it imports"))
            continue
        if not callable(found):
            out.append(_problem(f"module {module!r} has no function {function!r} for actor kind "
                                f"{kind!r}", where, "name an async function run(bus, config)"))
    return out
