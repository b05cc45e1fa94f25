"""Intake: gather the configured environments' tasks and pass them through the gates.

Consumes `EnvsConfig`, a seed and a split ('train' or 'heldout'); produces gated tasks one
at a time (through a callback, so a sampler can start before intake finishes), a
`GateTally`, and the bad task-file lines as errors. Environments are interleaved so every
domain gets tasks early. `gated_heldout` is the held-out choice of an evaluation round (the
evaluator's, and the benchmarks' that evaluate on the same tasks). It samples nothing and
publishes nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field
from typing import Awaitable, Callable, Iterable

import anyio
import msgspec
import structlog

from bus import subjects
from bus.errors import InputError
from bus.messages import Task
from envs import registry
from envs.config import EnvsConfig, GateConfig
from envs.evaluation import pick_heldout
from envs.gates import GateReport, GateTally, gate_task
from sandbox import open_backend

log = structlog.get_logger("envs.intake")

OnGated = Callable[[Task, GateReport], Awaitable[None]]


@dataclass
class Intake:
    """What an intake pass found."""

    tally: GateTally = field(default_factory=GateTally)
    errors: list[InputError] = field(default_factory=list)


def collect(config: EnvsConfig, *, seed: int, split: str) -> tuple[list[tuple[Task, GateConfig | None]], list[InputError]]:
    """The tasks of `split` from every enabled entry, interleaved, each with its gate config
    (None when the entry is not gated)."""
    per_entry = []
    errors: list[InputError] = []
    for name, entry in registry.enabled(config.use).items():
        found = registry.entry_tasks(name, entry, seed=seed)
        errors += found.errors
        gates = None
        if entry.gate:
            gates = config.gates if entry.checks is None else msgspec.structs.replace(
                config.gates, checks=list(entry.checks))
        per_entry.append([(t, gates) for t in found.tasks if t.split == split])
    mixed = [pair for group in itertools.zip_longest(*per_entry) for pair in group if pair]
    return mixed, errors


class KvGateCache:
    """Gate reports kept in KV whet-run (`<actor kind>.gate.<digest>`), so a restarted actor
    does not gate its tasks again. The digest covers the task's content id and the gates."""

    def __init__(self, bus) -> None:
        self.bus = bus

    def key(self, task: Task, gates: GateConfig) -> str:
        body = task.task_id + "|" + msgspec.json.encode(gates).decode()
        return subjects.gate_key(self.bus.identity.kind,
                                 hashlib.sha256(body.encode()).hexdigest()[:32])

    async def get(self, task: Task, gates: GateConfig) -> GateReport | None:
        raw = await self.bus.kv_get_bytes(subjects.BUCKET_RUN, self.key(task, gates))
        return GateReport(**json.loads(raw)) if raw else None

    async def put(self, task: Task, gates: GateConfig, report: GateReport) -> None:
        if "infra" not in report.reasons:  # a sandbox outage is not the task's verdict
            await self.bus.kv_put_bytes(subjects.BUCKET_RUN, self.key(task, gates),
                                        json.dumps(asdict(report)).encode())


async def gate_many(tasks: Iterable[tuple[Task, GateConfig | None]], sandbox_config,
                    on_gated: OnGated, *, concurrency: int,
                    cache: KvGateCache | None = None) -> GateTally:
    """Gate every task (several at once), calling `on_gated` for each as it finishes."""
    tally = GateTally()
    backend = await open_backend(sandbox_config)
    limiter = anyio.CapacityLimiter(concurrency)
    lanes = anyio.Semaphore(max(2, concurrency))  # tasks being gated at once
    try:
        async with anyio.create_task_group() as tg:
            for task, gates in tasks:
                await lanes.acquire()  # released by _one, in the child task
                tg.start_soon(_one, task, gates, backend, limiter, lanes, tally, on_gated, cache)
    finally:
        with anyio.CancelScope(shield=True):
            await backend.aclose()
    return tally


async def _one(task: Task, gates: GateConfig | None, backend, limiter, lanes, tally: GateTally,
               on_gated: OnGated, cache: KvGateCache | None) -> None:
    try:
        if gates is None:
            report = GateReport(task.task_id)
        else:
            report = await cache.get(task, gates) if cache else None
            if report is None:
                report = await gate_task(task, backend, gates, limiter)
                if cache:
                    await cache.put(task, gates, report)
        tally.add(report)
        if not report.accepted:
            log.info("task.rejected", task_id=task.task_id, reasons=report.reasons,
                     detail=" | ".join(report.detail)[:1000])
        await on_gated(task, report)
    finally:
        lanes.release()


async def gated_heldout(config: EnvsConfig, *, seed: int, per_domain: int,
                        cache: KvGateCache | None = None) -> dict[str, list[Task]]:
    """The held-out tasks a round evaluates, by domain: the first `per_domain` of each in id
    order that pass the gates (a few spares per domain are gated to cover rejections)."""
    tasks, _ = collect(config, seed=seed, split="heldout")
    gates = {t.task_id: g for t, g in tasks}
    spare = per_domain + per_domain // 4 + 2
    candidates = [t for group in pick_heldout([t for t, _ in tasks], spare).values() for t in group]
    accepted: list[Task] = []

    async def on_gated(task: Task, report: GateReport) -> None:
        if report.accepted:
            accepted.append(task)

    await gate_many([(t, gates[t.task_id]) for t in candidates], config.gates.sandbox, on_gated,
                    concurrency=config.gates.concurrency, cache=cache)
    return pick_heldout(accepted, per_domain)
