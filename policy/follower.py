"""A generator's view of the policy version: follow KV, fetch new weights, swap them in.

Consumes the `current` key of `whet-policy` (a `WeightVersion`) and the weights object it
names; produces weight swaps in an `Engine` (between batches) and the version the process
reports (`bus.stats.policy_version`). A generator that starts late loads the current version
before it serves. Intermediate versions are skipped when a newer one is already announced;
a version pruned before it could be fetched is skipped the same way. A LoRA version's
object is its adapter alone: the engine adds it to the base it loaded at start, so a late or
restarted generator reads the base from its model folder once, then only the current
adapter. `pin_round` fills an engine's pinned copy with the version a held-out round names.
It does not sample.
"""

from __future__ import annotations

import time

import anyio
import anyio.abc
import structlog

from bus import subjects
from bus.errors import BusError, ObjectCorrupt, ObjectMissing
from bus.messages import WeightVersion
from bus.nats_bus import Bus
from policy.engine import Engine
from policy.versions import current_version, fetch_weights, object_name, recorded_version

log = structlog.get_logger("policy.follower")


class WeightFollower:
    """Keeps an engine on the newest announced weights (KV whet-policy): a newer version is
    fetched and loaded, the same object under a newer number only renumbered."""

    def __init__(self, bus: Bus, engine: Engine) -> None:
        self.bus = bus
        self.engine = engine
        self.announced: WeightVersion | None = None
        self.running_object = ""
        self.seen: dict[int, WeightVersion] = {}
        "Every version announced while this process follows, for `pin_round`."
        self._seen_changed = anyio.Event()
        self._pin_lock = anyio.Lock()
        self._announced_changed = anyio.Event()
        self._loaded = anyio.Event()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Load the current version, report started, then follow every later one."""
        first = await current_version(self.bus)
        if first is not None:
            self.announced = first
            self._saw(first)
            await self._load(first)
        self.bus.stats.policy_version = self.engine.version
        task_status.started()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch)
            await self._load_announced()

    async def wait_for(self, version: int, timeout_s: float) -> None:
        """Return once the engine runs `version` or newer; TimeoutError after `timeout_s`."""
        with anyio.fail_after(timeout_s):
            while self.engine.version < version:
                await self._loaded.wait()

    async def pin_round(self, version: int, dtype: str, timeout_s: float) -> None:
        """Make the engine's pinned copy hold `version` (in `dtype`): the version-0 weights, or
        that version's object once its announcement is seen (TimeoutError after `timeout_s`).
        A version pruned before a round began raises ObjectMissing: the round's assignment
        is retried, then dead-lettered with that reason."""
        async with self._pin_lock:
            if version in self.engine.pinned_versions:
                return
            began = time.monotonic()
            blob = None
            if version > 0:
                blob = await fetch_weights(self.bus, await self._announcement(version, timeout_s))
            await self.engine.pin(version, blob, dtype)
            log.info("generator.round_weights_pinned", policy_version=version, dtype=dtype,
                     seconds=round(time.monotonic() - began, 3), bytes=len(blob or b""))

    async def _announcement(self, version: int, timeout_s: float) -> WeightVersion:
        """Where the weights of `version` are: its announcement once seen, or, for a version
        announced before this watch began (a generator restarted mid-round, a watch renewed
        after an outage shows only the newest), the record kept under its own key; without
        one (a stack from before those keys), its own object by name."""
        with anyio.fail_after(timeout_s):
            while version not in self.seen:
                if self.seen and max(self.seen) > version:
                    recorded = await recorded_version(self.bus, version)
                    return recorded or WeightVersion(version=version,
                                                     object_name=object_name(version))
                await self._seen_changed.wait()
        return self.seen[version]

    def _saw(self, record: WeightVersion) -> None:
        self.seen[record.version] = record
        for old in sorted(self.seen)[:-64]:  # a round names a recent version
            del self.seen[old]
        self._seen_changed.set()
        self._seen_changed = anyio.Event()

    async def _watch(self) -> None:
        async for record in self.bus.kv_watch(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                                              WeightVersion):
            self._saw(record)
            if self.announced is None or record.version > self.announced.version:
                self.announced = record
                self._announced_changed.set()

    async def _load_announced(self) -> None:
        while True:
            await self._announced_changed.wait()
            self._announced_changed = anyio.Event()
            record = self.announced
            if record is None or record.version <= self.engine.version:
                continue
            try:
                await self._load(record)
            except ObjectMissing:
                log.info("generator.version_skipped", policy_version=record.version,
                         reason="pruned before it was fetched")
            except (ObjectCorrupt, TimeoutError, BusError) as exc:
                log.error("generator.weights_failed", policy_version=record.version,
                          error=repr(exc))
                await anyio.sleep(1.0)
                self._announced_changed.set()

    async def _load(self, record: WeightVersion) -> None:
        began = time.monotonic()
        same = record.object_name == self.running_object
        blob = None if same else await fetch_weights(self.bus, record)
        fetched = time.monotonic()
        if same:
            self.engine.version = record.version  # same weights under a newer number
        else:
            await self.engine.load_weights(record.version, blob)
        self.running_object = record.object_name
        self.bus.stats.policy_version = self.engine.version
        log.info("generator.weights_loaded", policy_version=record.version,
                 fetch_s=round(fetched - began, 3), load_s=round(time.monotonic() - fetched, 3),
                 since_published_s=round(time.time() - record.created_at, 3) if record.created_at else None,
                 bytes=record.size, weights=record.weights)
        self._loaded.set()
        self._loaded = anyio.Event()
