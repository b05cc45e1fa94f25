"""The learner's side of publication: versions go out in order, each upload in the background.

Consumes (version, weight parts or None, step, samples) from the learner; produces the
object and the KV bump for each (`policy.versions`), or, for None, the same weights
announced under the new number (after a batch with nothing to learn), and prunes
all but the newest `keep` objects and those of versions due a held-out round that is not yet
reported (`round_every`, `reported`); each record says what its object holds (full weights,
or a LoRA adapter and its base). `submit` returns as soon as the uploader has taken the
version, so the next learner step trains while the weights travel; one upload runs at a
time, so versions are announced in order. It reads the evaluator's state in KV for which
rounds are reported (`follow_rounds`, `round_reported`). It does not decide when to publish.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import aclosing
from typing import Sequence

import anyio
import anyio.abc
import msgspec
import structlog

from bus import subjects
from bus.errors import BusUnavailable
from bus.messages import EvaluatorState, WeightVersion
from bus.nats_bus import Bus
from policy.versions import announce, prune_versions, publish_weights

log = structlog.get_logger("policy.publisher")

Item = tuple[int, Sequence[memoryview] | None, int, int]


class Publisher:
    """Uploads weights to the object store and announces each version in KV, in order; prunes old ones."""

    def __init__(self, bus: Bus, keep: int, weights: str = "full", base: str = "",
                 round_every: int = 0) -> None:
        self.bus = bus
        self.round_every = round_every
        "Versions due a held-out round (multiples of it; 0: none) are kept until it is reported."
        self.reported = -1
        "The newest version whose round the evaluator reported (`EvaluatorState.last_reported`)."
        self.due: dict[int, str] = {}
        "Version due a round -> its object, kept from pruning while the round may still read it."
        self.weights, self.base = weights, base
        "What every version's object holds ('full' or 'lora'), and the base of an adapter."
        self.current: WeightVersion | None = None
        "The newest version announced."
        self.recent: deque[str] = deque(maxlen=keep)
        self._send, self._receive = anyio.create_memory_object_stream[Item](0)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Upload what is submitted, in order, until `close`."""
        task_status.started()
        async with self._receive:
            async for version, parts, step, samples in self._receive:
                await self.publish(version, parts, step=step, samples=samples)

    async def submit(self, version: int, parts: Sequence[memoryview] | None, *, step: int,
                     samples: int) -> None:
        """Hand a version to the uploader; waits only while the previous one is still going."""
        await self._send.send((version, parts, step, samples))

    async def close(self) -> None:
        """No more versions; `run` returns after the last upload."""
        await self._send.aclose()

    def adopt(self, record: WeightVersion) -> None:
        """Take `record` (already announced) as the current version."""
        self.current = record
        if record.object_name:
            self.recent.append(record.object_name)

    async def follow_rounds(self) -> None:
        """Follow the rounds the evaluator reported (KV whet-run), so a version due a round
        stays in the object store until then (a round may start after `keep` newer ones: a
        generator pins its weights when it reaches the round's work). Runs until cancelled."""
        if not self.round_every:
            return
        async for state in self.bus.kv_watch(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE,
                                             EvaluatorState):
            self.reported = max(self.reported, state.last_reported)

    async def publish(self, version: int, parts: Sequence[memoryview] | None, *, step: int,
                      samples: int) -> WeightVersion:
        """Upload and announce `version` now (None: the current weights, renumbered)."""
        if parts is not None:
            record = await publish_weights(self.bus, version, parts, step=step, samples=samples,
                                           weights=self.weights, base=self.base)
        else:
            current = self.current or WeightVersion(version=0, object_name="",
                                                    weights=self.weights, base=self.base)
            record = msgspec.structs.replace(current, version=version, step=step,
                                             samples=samples, created_at=time.time())
            await announce(self.bus, record)
        self.adopt(record)
        if self.round_every and version % self.round_every == 0 and record.object_name:
            self.due[version] = record.object_name
        self.due = {v: name for v, name in self.due.items() if v > self.reported}
        try:
            pruned = await prune_versions(self.bus, set(self.recent) | set(self.due.values()))
        except BusUnavailable as exc:  # the next publish prunes what is left
            log.warning("learner.prune_failed", error=str(exc))
            return record
        if pruned:
            log.info("learner.versions_pruned", objects=pruned)
        return record


async def round_reported(bus: Bus, version: int) -> bool:
    """Wait until the evaluator's state says the round of `version` is reported (True), or
    until the bus is stopping (False). The watch rides through outages."""
    reported = False
    async with anyio.create_task_group() as tg:
        async def give_up_when_stopping() -> None:
            await bus.stopping.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(give_up_when_stopping)
        async with aclosing(bus.kv_watch(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE,
                                         EvaluatorState)) as states:
            async for state in states:
                if state.last_reported >= version:
                    reported = True
                    break
        tg.cancel_scope.cancel()
    return reported
