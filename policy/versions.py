"""Published policy versions on the bus: weights in the object store, the pointer in KV.

Consumes weight bytes and version numbers (learner) or `WeightVersion` records
(generators); produces objects in the `whet-weights` store, the `current` and per-version
keys of the `whet-policy` bucket, and bytes read back after their checksum is verified. Old
versions are pruned by name. It does not know what the bytes hold (see `policy.weights`).
"""

from __future__ import annotations

import time
from typing import Sequence

import structlog

from bus import subjects
from bus.messages import WeightVersion
from bus.nats_bus import Bus
from bus.objects import delete_object, list_objects, put_object, read_object

log = structlog.get_logger("policy.versions")
PREFIX = "policy-v"


def object_name(version: int) -> str:
    """Object-store name of the weights of `version`."""
    return f"{PREFIX}{version:08d}"


async def current_version(bus: Bus) -> WeightVersion | None:
    """The latest published version, if any."""
    return await bus.kv_get(subjects.BUCKET_POLICY, subjects.KEY_POLICY, WeightVersion)


async def announce(bus: Bus, version: WeightVersion) -> None:
    """Make `version` the current one (generators watching the key load it), its record kept
    under its own key first, so that whoever sees it announced can look it up later."""
    await bus.kv_put(subjects.BUCKET_POLICY, subjects.version_key(version.version), version)
    await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY, version)


async def recorded_version(bus: Bus, version: int) -> WeightVersion | None:
    """The record `version` was announced with (its object: its own, an older version's when
    it was renumbered, or '' for the initial weights); None if it was never announced."""
    return await bus.kv_get(subjects.BUCKET_POLICY, subjects.version_key(version), WeightVersion)


async def publish_weights(bus: Bus, version: int, blob: bytes | Sequence[memoryview], *,
                          step: int, samples: int, weights: str = "full",
                          base: str = "") -> WeightVersion:
    """Store `blob` (bytes, or parts stored back to back) as `version` and announce it
    (`weights`, `base`: what the record says it holds, `WeightVersion`)."""
    began = time.monotonic()
    stored = await put_object(bus, subjects.BUCKET_WEIGHTS, object_name(version), blob)
    record = WeightVersion(version=version, object_name=stored.name, size=stored.size,
                           sha256=stored.sha256, dtype="bfloat16", step=step,
                           samples=samples, created_at=time.time(), weights=weights, base=base)
    await announce(bus, record)
    log.info("learner.weights_published", policy_version=version, bytes=stored.size,
             weights=weights, chunks=stored.chunks, seconds=round(time.monotonic() - began, 3))
    return record


async def fetch_weights(bus: Bus, version: WeightVersion) -> bytearray | None:
    """The weight bytes of `version`; None for the version-0 weights (object name '').

    Raises ObjectMissing once the version is pruned, ObjectCorrupt on a bad checksum.
    """
    if not version.object_name:
        return None
    return await read_object(bus, subjects.BUCKET_WEIGHTS, version.object_name)


async def prune_versions(bus: Bus, keep: set[str]) -> list[str]:
    """Delete every policy object whose name is not in `keep`; returns what went."""
    gone = []
    for name in await list_objects(bus, subjects.BUCKET_WEIGHTS):
        if name.startswith(PREFIX) and name not in keep:
            await delete_object(bus, subjects.BUCKET_WEIGHTS, name)
            gone.append(name)
    return sorted(gone)
