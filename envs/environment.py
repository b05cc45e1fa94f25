"""The environment standard: what an environment declares, and how its tasks are made.

Consumes an `Environment` (declared by a module as `ENVIRONMENT`, or built from a task file;
what it declares: `Environment`) and a seed; produces `bus.messages.Task` records with
stable ids, a difficulty rung and a split. Ids are derived from the content, so the same
task always gets the same id and a task is always in the same split:
`<env>/v<version>-L<level>-<digest>`. It does not check tasks (that is `envs.gates`) and
does not choose which ones are practised (that is `envs.curriculum`).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterator, Mapping

import msgspec

from bus.messages import Limits, Task, Verifier

GENERATED_LIMITS = Limits(timeout_s=5.0, cpu_s=5.0, memory_mb=256, pids=16, disk_mb=16)
"Limits of generated tasks: small programs on small inputs."


@dataclass(frozen=True)
class Draft:
    """One generated task before it gets its id, split and environment fields."""

    prompt: str
    verifier: Verifier
    entry_point: str = ""
    files: dict[str, str] = field(default_factory=dict)
    family: str = ""
    "Which template made it (for reports and variety checks)."


@dataclass(frozen=True)
class Environment:
    """A source of practice tasks: one module (or task file) plus a config entry. It declares
    its name, version and domain; a task generator `make_task(rng, level) -> Draft` or a fixed
    task list (`load_tasks`); the runtime and limits its tasks run under; the verifier of each
    task (visible tests, hidden tests, reference), inside the Draft; `levels` (rungs
    0..levels-1) and `difficulty`, a sentence saying what a rung changes."""

    name: str
    "Unique name; the config entry `[envs.use.<name>]` refers to it."
    version: str
    "Bump when tasks change meaning; ids include it."
    domain: str
    "Domain for curriculum mix and metrics ('python', 'data', 'structured', ...)."
    summary: str
    "One line saying what the tasks are."
    levels: int = 1
    "Rungs of the difficulty ladder, 0 easiest."
    difficulty: str = ""
    "What a higher rung changes (shown by `whet tasks envs`)."
    make_task: Callable[[random.Random, int], Draft] | None = None
    "Generator: one task at a rung, all randomness from `rng`."
    load_tasks: Callable[[], list[Task]] | None = None
    "A fixed task set instead of a generator (imports, task files)."
    runtime: str = "python"
    "Executor environment spec the tasks run in."
    limits: Limits = GENERATED_LIMITS
    "Limits of each execution of an attempt."
    demo_agent: Callable[[Task, Any, random.Random, bool], Awaitable[tuple[Any, bool]]] | None = None
    ("Tool tasks: `(task, backend, rng, wrong_first) -> (agent, wrong_first_made)`, a scripted "
     "agent whose episodes are demonstrations (`envs.demos`); None: no tool demonstrations.")


def task_id(env: Environment, level: int, draft: Draft) -> str:
    """Stable id from the content: the same task always has the same id."""
    body = msgspec.json.encode([draft.prompt, draft.verifier, draft.entry_point, draft.files])
    digest = hashlib.sha256(body).hexdigest()[:12]
    return f"{env.name}/v{env.version}-L{level}-{digest}"


def split_of(task_id_: str, heldout_share: float, validation_share: float = 0.0) -> str:
    """'heldout' for a fixed, content-derived share of ids, 'validation' for the next share
    (so adding a validation share moves no task into or out of the held-out set), 'train'
    for the rest."""
    bucket = int(hashlib.sha256(task_id_.encode()).hexdigest()[:8], 16) % 10_000
    if bucket < heldout_share * 10_000:
        return "heldout"
    return "validation" if bucket < (heldout_share + validation_share) * 10_000 else "train"


def to_task(env: Environment, level: int, draft: Draft, heldout_share: float,
            validation_share: float = 0.0) -> Task:
    """The Task record of a draft: id, split, difficulty, family, runtime and limits filled in."""
    tid = task_id(env, level, draft)
    return Task(task_id=tid, env=env.name, env_version=env.version, domain=env.domain,
                prompt=draft.prompt, verifier=draft.verifier,
                split=split_of(tid, heldout_share, validation_share),  # type: ignore[arg-type]
                difficulty=float(level), entry_point=draft.entry_point, files=draft.files,
                runtime=env.runtime, limits=env.limits, family=draft.family)


def with_budgets(task: Task, budgets: Mapping[str, int]) -> Task:
    """`task` with `budgets` (`max_steps`, `max_tokens`, `result_chars`) in its verifier's
    extra in place of the environment's; its id and split stay as they were made."""
    extra = {**task.verifier.extra, **{k: str(v) for k, v in budgets.items()}}
    return msgspec.structs.replace(
        task, verifier=msgspec.structs.replace(task.verifier, extra=extra))


def generate(env: Environment, count: int, *, seed: int = 0, heldout_share: float = 0.0,
             levels: list[int] | None = None, validation_share: float = 0.0) -> Iterator[Task]:
    """Up to `count` distinct tasks, spread evenly over `levels` (default: every rung).

    Deterministic in (env, seed): each task draws from its own seeded generator, so a
    restarted process makes the same tasks. Duplicates (same content) are skipped; the
    attempts are bounded so a generator with few distinct tasks cannot loop forever.
    """
    if env.make_task is None:
        tasks = env.load_tasks() if env.load_tasks else []
        yield from tasks[:count]
        return
    rungs = levels if levels is not None else list(range(env.levels))
    seen: set[str] = set()
    made = 0
    for i in range(count * 4):
        if made >= count:
            return
        level = rungs[i % len(rungs)]
        rng = random.Random(f"{seed}/{env.name}/{env.version}/{i}")
        task = to_task(env, level, env.make_task(rng, level), heldout_share, validation_share)
        if task.task_id in seen:
            continue
        seen.add(task.task_id)
        made += 1
        yield task
