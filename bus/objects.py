"""Object-store primitives for weight versions: chunked, checksummed put and get.

Consumes bytes and object names; produces objects in a NATS object-store bucket (the
standard layout, so the `nats` CLI can read them) and bytes read back after a SHA-256
check. It does not know what the bytes are; the learner and generators decide that.

Why not nats-py's own `put`/`get`: its put waits for each 128 KiB chunk's ack in turn, and
its get concatenates bytes (quadratic: 19 s for 256 MB, measured here). Here chunks are
1 MiB, acks are pipelined, and reads come through a pull consumer in batches.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone

import anyio
import nats.js.errors
from nats.js import api
from nats.js.kv import MSG_ROLLUP_SUBJECT

from bus.errors import ObjectCorrupt
from bus.nats_bus import Bus

CHUNK_BYTES = 1024 * 1024
_READ_BATCH = 16


@dataclass(frozen=True)
class StoredObject:
    """What `put_object` stored."""

    name: str
    size: int
    sha256: str
    chunks: int


def _stream(bucket: str) -> str:
    return f"OBJ_{bucket}"


def _meta_subject(bucket: str, name: str) -> str:
    return f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"


async def put_object(bus: Bus, bucket: str, name: str, data: bytes | memoryview) -> StoredObject:
    """Store `data` under `name`, replacing any older object of that name."""
    view = memoryview(data)
    chunk_bytes = min(CHUNK_BYTES, bus.nc.max_payload - 4096)
    nuid = bus.nc._nuid.next().decode()  # the object layout names chunks by a fresh nuid
    chunk_subject = f"$O.{bucket}.C.{nuid}"
    digest = hashlib.sha256()
    pending = []
    try:
        for start in range(0, len(view), chunk_bytes):
            chunk = view[start:start + chunk_bytes]
            digest.update(chunk)
            pending.append(await bus.js.publish_async(chunk_subject, bytes(chunk)))
        with anyio.fail_after(bus.settings.publish_deadline_s):
            for fut in pending:
                await fut
        info = api.ObjectInfo(
            name=name, bucket=bucket, nuid=nuid, size=len(view), chunks=len(pending),
            mtime=datetime.now(timezone.utc).isoformat(),
            digest="SHA-256=" + base64.urlsafe_b64encode(digest.digest()).decode(),
            options=api.ObjectMetaOptions(max_chunk_size=chunk_bytes),
        )
        old = await _info(bus, bucket, name)
        await bus.js.publish(_meta_subject(bucket, name), json.dumps(info.as_dict()).encode(),
                             headers={api.Header.ROLLUP: MSG_ROLLUP_SUBJECT})
    except BaseException:
        with anyio.CancelScope(shield=True):
            await bus.js.purge_stream(_stream(bucket), subject=chunk_subject)
        raise
    if old is not None and old.nuid != nuid:
        await bus.js.purge_stream(_stream(bucket), subject=f"$O.{bucket}.C.{old.nuid}")
    return StoredObject(name, len(view), digest.hexdigest(), len(pending))


async def _info(bus: Bus, bucket: str, name: str) -> api.ObjectInfo | None:
    try:
        msg = await bus.js.get_last_msg(_stream(bucket), _meta_subject(bucket, name))
    except nats.js.errors.NotFoundError:
        return None
    info = api.ObjectInfo.from_response(json.loads(msg.data))
    return None if info.deleted else info


async def get_object(bus: Bus, bucket: str, name: str) -> bytes:
    """Read `name` back whole; raises ObjectCorrupt if its SHA-256 does not match."""
    info = await _info(bus, bucket, name)
    if info is None:
        raise nats.js.errors.ObjectNotFoundError()
    out = bytearray(info.size or 0)
    if not info.size:
        return bytes(out)
    sub = await bus.js.pull_subscribe(
        f"$O.{bucket}.C.{info.nuid}", stream=_stream(bucket),
        config=api.ConsumerConfig(ack_policy=api.AckPolicy.NONE,
                                  deliver_policy=api.DeliverPolicy.ALL,
                                  inactive_threshold=30.0, mem_storage=True))
    offset = 0
    digest = hashlib.sha256()
    try:
        with anyio.fail_after(bus.settings.publish_deadline_s):
            received = 0
            while received < (info.chunks or 0):
                want = min(_READ_BATCH, info.chunks - received)
                for msg in await sub.fetch(want, timeout=bus.settings.request_timeout_s):
                    out[offset:offset + len(msg.data)] = msg.data
                    digest.update(msg.data)
                    offset += len(msg.data)
                    received += 1
    finally:
        with anyio.CancelScope(shield=True):
            await sub.unsubscribe()
    expected = base64.urlsafe_b64decode(info.digest.split("=", 1)[1])
    if offset != info.size or digest.digest() != expected:
        raise ObjectCorrupt(f"{bucket}/{name}: {offset} of {info.size} bytes, checksum mismatch")
    return bytes(out)


async def delete_object(bus: Bus, bucket: str, name: str) -> None:
    """Delete `name` and its chunks; a missing object is not an error."""
    obs = await bus.js.object_store(bucket)
    try:
        await obs.delete(name)
    except nats.js.errors.NotFoundError:
        pass


async def list_objects(bus: Bus, bucket: str) -> list[str]:
    """Names of the live objects in `bucket`."""
    obs = await bus.js.object_store(bucket)
    try:
        return [o.name for o in await obs.list(ignore_deletes=True)]
    except nats.js.errors.NotFoundError:
        return []
