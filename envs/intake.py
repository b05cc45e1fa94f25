"""Intake: gather the configured environments' tasks and pass them through the gates.

Consumes `EnvsConfig`, a seed and a split ('train' or 'heldout'); produces gated tasks one
at a time (through a callback, so a sampler can start before intake finishes), a
`GateTally`, and the bad task-file lines as errors. Environments are interleaved so every
domain gets tasks early; `FirstAccepted` keeps a pool that does not depend on which gate
finished first. `gated_heldout` is the held-out choice of an evaluation round (the
evaluator's, and the benchmarks' that evaluate on the same tasks): stratified, gated, each
rejection replaced within its stratum. It samples nothing and publishes nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Awaitable, Callable, Iterable, Iterator, Mapping

import anyio
import msgspec
import structlog

from bus import subjects
from bus.errors import InputError
from bus.messages import Task
from envs import registry, taskfile
from envs.config import EnvsConfig, GateConfig
from envs.evaluation import pick_heldout
from envs.gates import GateReport, GateTally, gate_task
from judging import kinds
from sandbox import Metered, open_backend

log = structlog.get_logger("envs.intake")

OnGated = Callable[[Task, GateReport], Awaitable[None]]


@dataclass
class Intake:
    """What an intake pass found."""

    tally: GateTally = field(default_factory=GateTally)
    errors: list[InputError] = field(default_factory=list)


def collect(config: EnvsConfig, *, seed: int, split: str) -> tuple[list[tuple[Task, GateConfig | None]], list[InputError]]:
    """The tasks of `split` from every enabled entry, interleaved, each with its gate config
    (None when the entry is not gated). With `train_ids` set, the training split keeps only
    the listed tasks, and each listed id that no entry yields is an error naming its line;
    with `skip_ids` set, it leaves the listed tasks out."""
    allowed = taskfile.read_ids(config.train_ids) if split == "train" and config.train_ids else None
    skipped = taskfile.read_ids(config.skip_ids) if split == "train" and config.skip_ids else {}
    per_entry = []
    errors: list[InputError] = []
    for name, entry in registry.enabled(config.use).items():
        found = registry.entry_tasks(name, entry, seed=seed)
        errors += found.errors
        gates = None
        if entry.gate:
            gates = config.gates if entry.checks is None else msgspec.structs.replace(
                config.gates, checks=list(entry.checks))
        per_entry.append([(t, gates) for t in found.tasks if t.split == split
                          and (allowed is None or t.task_id in allowed)
                          and t.task_id not in skipped])
    mixed = [pair for group in itertools.zip_longest(*per_entry) for pair in group if pair]
    if allowed is not None:
        found_ids = {t.task_id for t, _ in mixed}
        errors += [InputError(config.train_ids, line, "", f"{task_id!r} is no training task of "
                              "the enabled environments") for task_id, line in allowed.items()
                   if task_id not in found_ids]
    return mixed, errors


def code_digest() -> str:
    """A digest of the code a gate report depends on (gates, mutants, judging, sandbox), so
    a report kept on disk is reused only by the code that made it."""
    root = Path(__file__).resolve().parent.parent
    files = sorted([*(root / "envs").glob("gates.py"), *(root / "envs").glob("mutants.py"),
                    *(root / "judging").rglob("*.py"), *(root / "sandbox").glob("*.py")])
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def disk_cache_dir() -> Path:
    """Where gate reports are kept across runs: $WHET_GATE_CACHE or ~/.cache/whetstone/gates."""
    env = os.environ.get("WHET_GATE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "whetstone" / "gates"


class KvGateCache:
    """Gate reports kept in KV whet-run (`<actor kind>.gate.<digest>`), so a restarted actor
    does not gate its tasks again, and (`keep_on_disk`) in files under `disk_cache_dir()`,
    so the next run on this machine does not either. The digest covers the task's content
    id (and a verifiers task's rubric source, which its id leaves out), the gates and the
    code that judged them. Without a bus (benchmarks) only the disk."""

    def __init__(self, bus, keep_on_disk: bool = True) -> None:
        self.bus = bus
        self.disk = disk_cache_dir() / code_digest() if keep_on_disk else None

    def digest(self, task: Task, gates: GateConfig) -> str:
        body = task.task_id + "|" + msgspec.json.encode(gates).decode()
        if kinds.of(task).job == "rubric":  # its id leaves out the rubric's source
            body += "|" + task.verifier.extra.get("files", "")
        return hashlib.sha256(body.encode()).hexdigest()[:32]

    async def get(self, task: Task, gates: GateConfig) -> GateReport | None:
        digest = self.digest(task, gates)
        raw = None if self.bus is None else await self.bus.kv_get_bytes(
            subjects.BUCKET_RUN, subjects.gate_key(self.bus.identity.kind, digest))
        if not raw and self.disk is not None:
            try:
                raw = (self.disk / f"{digest}.json").read_bytes()
            except OSError:
                raw = None
        return GateReport(**json.loads(raw)) if raw else None

    async def put(self, task: Task, gates: GateConfig, report: GateReport) -> None:
        if "infra" in report.reasons:  # a sandbox outage is not the task's verdict
            return
        digest, raw = self.digest(task, gates), json.dumps(asdict(report)).encode()
        if self.bus is not None:
            await self.bus.kv_put_bytes(subjects.BUCKET_RUN,
                                        subjects.gate_key(self.bus.identity.kind, digest), raw)
        if self.disk is not None:
            try:
                self.disk.mkdir(parents=True, exist_ok=True)
                tmp = self.disk / f".{digest}.{os.getpid()}"
                tmp.write_bytes(raw)
                tmp.replace(self.disk / f"{digest}.json")
            except OSError as exc:  # a full or read-only disk costs a re-gate next run, no more
                log.warning("gate.cache_write_failed", error=str(exc))


async def gate_many(tasks: Iterable[tuple[Task, GateConfig | None]], sandbox_config,
                    on_gated: OnGated, *, concurrency: int,
                    cache: KvGateCache | None = None,
                    on_cpu: Callable[[float], None] = lambda seconds: None) -> GateTally:
    """Gate every task (several at once), calling `on_gated` for each as it finishes and
    `on_cpu` with the sandboxes' CPU seconds so far."""
    backend = Metered(await open_backend(sandbox_config))
    try:
        return await gate_on(backend, tasks, on_gated, concurrency=concurrency, cache=cache,
                             on_cpu=on_cpu)
    finally:
        with anyio.CancelScope(shield=True):
            await backend.aclose()


async def gate_on(backend: Metered, tasks: Iterable[tuple[Task, GateConfig | None]],
                  on_gated: OnGated, *, concurrency: int, cache: KvGateCache | None = None,
                  on_cpu: Callable[[float], None] = lambda seconds: None) -> GateTally:
    """`gate_many` on a backend the caller opened (and closes)."""
    tally = GateTally()

    async def gated(task: Task, report: GateReport) -> None:
        on_cpu(backend.cpu_s)
        await on_gated(task, report)

    limiter = anyio.CapacityLimiter(concurrency)
    lanes = anyio.Semaphore(max(2, concurrency))  # tasks being gated at once
    async with anyio.create_task_group() as tg:
        for task, gates in tasks:
            await lanes.acquire()  # released by _one, in the child task
            tg.start_soon(_one, task, gates, backend, limiter, lanes, tally, gated, cache)
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


class FirstAccepted:
    """Each domain's first `limit` accepted tasks in the listed order, whatever order the
    gates finish in (several run at once, and a cold gate cache makes their timing vary).

    `add(task, accepted)` takes each report and returns the tasks it releases, in order: a
    task is released once every task listed before it in its domain has its report, until
    the domain holds `limit` (0: no limit). `gating(tasks)` feeds the gates until those first
    tasks are known; reports of tasks beyond them are dropped."""

    def __init__(self, tasks: Iterable[Task], limit: int = 0) -> None:
        self.limit = limit
        self.order: dict[str, list[str]] = {}
        for task in tasks:
            self.order.setdefault(task.domain, []).append(task.task_id)
        self.next: dict[str, int] = dict.fromkeys(self.order, 0)
        self.waiting: dict[str, tuple[Task, bool]] = {}
        self.released: dict[str, int] = dict.fromkeys(self.order, 0)
        "Tasks released per domain."

    def add(self, task: Task, accepted: bool) -> list[Task]:
        """Record one report; the tasks it releases, in the listed order."""
        domain, out = task.domain, []
        self.waiting[task.task_id] = (task, accepted)
        ids = self.order.get(domain, [])
        while self.next.get(domain, 0) < len(ids) and ids[self.next[domain]] in self.waiting:
            first, ok = self.waiting.pop(ids[self.next[domain]])
            self.next[domain] += 1
            if ok and not self.full(domain):
                self.released[domain] += 1
                out.append(first)
        return out

    def gating(self, tasks: Iterable[tuple[Task, GateConfig | None]]
               ) -> Iterator[tuple[Task, GateConfig | None]]:
        """`tasks`, lazily, skipping a domain's once it is `full`. Read while gating, so
        gating stops as soon as each domain's first tasks are known."""
        for task, gates in tasks:
            if not self.full(task.domain):
                yield task, gates

    def full(self, domain: str) -> bool:
        """True once `domain` holds `limit` released tasks."""
        return bool(self.limit) and self.released.get(domain, 0) >= self.limit


async def gated_heldout(config: EnvsConfig, *, seed: int, per_domain: int,
                        split: str = "heldout", domain_tasks: Mapping[str, int] | None = None,
                        cache: KvGateCache | None = None,
                        progress: Callable[[int, int], None] = lambda done, total: None,
                        on_cpu: Callable[[float], None] = lambda seconds: None,
                        ) -> dict[str, list[Task]]:
    """The tasks a round evaluates, by domain: `pick_heldout`'s stratified choice of `split`
    ('heldout', or 'validation' while choosing settings), `per_domain` of each (`domain_tasks`
    sets another number for the domains it names), every one passing the gates. Only the
    chosen tasks are gated; a rejected one gives its seat to the next task of its stratum
    (rung and family), gated in the next pass, so the choice depends on the gates only
    through those replacements. `progress(done, total)` is told as each is gated."""
    tasks, _ = collect(config, seed=seed, split=split)
    gates = {t.task_id: g for t, g in tasks}
    every = [t for t, _ in tasks]
    accepted: dict[str, bool] = {}

    def choice() -> dict[str, list[Task]]:  # a task not gated yet counts as usable
        return pick_heldout(every, per_domain, split, domain_tasks,
                            usable=lambda t: accepted.get(t.task_id, True))

    total = sum(map(len, choice().values()))
    progress(0, total)

    async def on_gated(task: Task, report: GateReport) -> None:
        accepted[task.task_id] = report.accepted
        progress(min(len(accepted), total), total)

    backend = Metered(await open_backend(config.gates.sandbox))
    try:
        while True:  # until no chosen task waits for its gates; each pass replaces rejections
            chosen = choice()
            waiting = [[t for t in ts if t.task_id not in accepted] for ts in chosen.values()]
            if not any(waiting):
                return chosen
            mixed = [(t, gates[t.task_id]) for group in itertools.zip_longest(*waiting)
                     for t in group if t is not None]  # every domain early
            await gate_on(backend, mixed, on_gated, concurrency=config.gates.concurrency,
                          cache=cache, on_cpu=on_cpu)
    finally:
        with anyio.CancelScope(shield=True):
            await backend.aclose()
