"""Demonstrations from the training split of the environments in use, for a warm start.

Consumes `[envs]` (the entries, their splits and gates, the mix), the run's seed, the sandbox
config episodes and answers are judged on, the `JudgeConfig` and the choice (domains, per
task, most tasks per domain); produces `Made`: the `Demo`s in task order and a `DomainTally`
per domain. Tasks come as the sampler's intake takes them (`envs.intake.collect` with split
'train', `[envs] train_ids` applied, then the same gates and gate cache), so no held-out or
validation task ever enters. Single-turn tasks give their reference answer
(`envs.demos.answers`), tool tasks their environment's scripted episodes
(`envs.demos.episodes`). It trains nothing and writes no file (`bus.demos_file` does).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import anyio

from bus.errors import ConfigError, InputError
from bus.messages import Demo, Task
from envs import registry
from envs.config import EnvsConfig
from envs.demos.answers import answer_demos, answers
from envs.demos.episodes import task_demos
from envs.environment import Environment
from envs.intake import FirstAccepted, KvGateCache, collect, gate_many
from judging.config import JudgeConfig
from judging.tools import is_tool_task
from sandbox import open_backend
from sandbox.config import SandboxConfig
from sandbox.workspace import WorkspaceCache


@dataclass
class DomainTally:
    """What one domain gave: tasks gated, accepted, demonstrations kept and failed."""

    gated: int = 0
    accepted: int = 0
    kept: int = 0
    failed: int = 0
    repaired: int = 0
    "Kept demonstrations whose first edit was wrong, then repaired."
    why: Counter = field(default_factory=Counter)
    "Why demonstrations failed (the judge's outcome and cause, 'malformed', 'no demonstration')."


@dataclass
class Made:
    """The demonstrations made, with what each domain gave and how long it took."""

    demos: list[Demo] = field(default_factory=list)
    domains: dict[str, DomainTally] = field(default_factory=dict)
    errors: list[InputError] = field(default_factory=list)
    "Bad task-file lines (or `train_ids` lines) met while collecting tasks."
    seconds: float = 0.0


def in_use(envs: EnvsConfig, domains: Sequence[str]) -> list[str]:
    """The domains chosen: `domains`, or every domain the mix trains on that an enabled
    environment has; ConfigError naming a chosen domain no enabled environment has."""
    have = sorted({registry.resolve(name, entry).domain
                   for name, entry in registry.enabled(envs.use).items()})
    chosen = list(domains) or sorted(d for d, w in envs.mix.items() if w > 0 and d in have)
    unknown = [d for d in chosen if d not in have]
    if unknown:
        raise ConfigError("demos", "domains", f"{unknown[0]!r}: no enabled environment has that "
                          f"domain (they have {', '.join(have) or 'none'}); enable one in "
                          "[envs.use.*] or choose another")
    return chosen


def environments(envs: EnvsConfig) -> dict[str, Environment]:
    """The enabled environments by the name their tasks carry (`Task.env`)."""
    out = {}
    for name, entry in registry.enabled(envs.use).items():
        env = registry.resolve(name, entry)
        out[env.name] = out[name] = env
    return out


async def gated_training(envs: EnvsConfig, domains: list[str], *, seed: int, limit: int
                         ) -> tuple[list[Task], dict[str, DomainTally], list[InputError]]:
    """The training tasks of `domains` the gates accept, in intake order, at most `limit` per
    domain (0: all), with each domain's tally of gating."""
    found, errors = collect(envs, seed=seed, split="train")
    order = {t.task_id: i for i, (t, _) in enumerate(found)}
    tasks = [(t, g) for t, g in found if t.domain in domains]
    tally = {d: DomainTally() for d in domains}
    accepted: list[Task] = []
    pool = FirstAccepted((t for t, _ in tasks), limit)

    async def on_gated(task: Task, report) -> None:
        tally[task.domain].gated += 1
        for ready in pool.add(task, report.accepted):
            tally[ready.domain].accepted += 1
            accepted.append(ready)

    await gate_many(pool.gating(tasks), envs.gates.sandbox, on_gated,
                    concurrency=envs.gates.concurrency,
                    cache=KvGateCache(None, envs.gates.keep_reports))
    return sorted(accepted, key=lambda t: order[t.task_id]), tally, errors


async def make_demos(envs: EnvsConfig, sandbox: SandboxConfig, *, seed: int,
                     judge: JudgeConfig = JudgeConfig(), domains: Sequence[str] = (),
                     per_task: int = 1, limit: int = 0, concurrency: int = 2) -> Made:
    """Demonstrations of the gated training tasks of `domains` (every domain the mix trains
    on when empty): one reference answer per single-turn task, `per_task` scripted episodes
    per tool task, at most `limit` tasks per domain (0: all); episodes and answers are
    judged on `sandbox`, `concurrency` at a time."""
    started = time.monotonic()
    chosen = in_use(envs, domains)
    tasks, tally, errors = await gated_training(envs, chosen, seed=seed, limit=limit)
    by_env = environments(envs)
    found: dict[str, list[Demo]] = {}
    backend = await open_backend(sandbox, concurrency)
    cache = WorkspaceCache()
    try:
        single = [t for t in tasks if not is_tool_task(t) and answers(t)]
        for task, demo in zip(single, await answer_demos(single, backend, judge,
                                                         concurrency=concurrency)):
            found[task.task_id] = [demo] if demo else []
            _count(tally[task.domain], demo, "fail: the judge fails the reference answer")
        limiter = anyio.CapacityLimiter(concurrency)

        async def episodes(task: Task) -> None:
            async with limiter:
                made = await task_demos(task, by_env[task.env], backend, cache, seed=seed,
                                        per_task=per_task)
            found[task.task_id] = [m.demo for m in made if m.demo]
            for m in made:
                _count(tally[task.domain], m.demo, m.why)

        async with anyio.create_task_group() as tg:
            for task in tasks:
                if task.task_id in found:
                    continue
                if is_tool_task(task) and by_env[task.env].demo_agent is not None:
                    tg.start_soon(episodes, task)
                else:
                    found[task.task_id] = []
                    _count(tally[task.domain], None, "no demonstration for its kind")
    finally:
        cache.close()
        with anyio.CancelScope(shield=True):
            await backend.aclose()
    demos = [d for t in tasks for d in found.get(t.task_id, [])]
    return Made(demos, tally, errors, time.monotonic() - started)


def _count(tally: DomainTally, demo: Demo | None, why: str) -> None:
    if demo is None:
        tally.failed += 1
        tally.why[why] += 1
    else:
        tally.kept += 1
        tally.repaired += demo.repaired
