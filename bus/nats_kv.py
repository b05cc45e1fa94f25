"""KV calls of the bus: typed values under keys, written through outages, watched.

Consumes messages (encoded with `bus.codec`) or raw bytes; produces entries in JetStream KV
buckets and decoded values read back. A mixin of `bus.nats_bus.Bus` (it uses the bus's
JetStream context, settings and refusal check); it creates no buckets.
"""

from __future__ import annotations

import time
from typing import AsyncIterator, TypeVar

import anyio
import nats.errors
import nats.js.errors

from bus import subjects
from bus.codec import decode, encode
from bus.errors import BusUnavailable
from bus.messages import Message
from bus.nats_retry import RETRYABLE

M = TypeVar("M", bound=Message)


class KeyValueCalls:
    """`kv_*` methods; mixed into `Bus`."""

    async def kv_put(self, bucket: str, key: str, msg: Message) -> None:
        """Write `msg` under `key`, retrying through an outage until the publish deadline."""
        await self.kv_put_bytes(bucket, key, encode(msg))

    async def kv_put_bytes(self, bucket: str, key: str, value: bytes) -> None:
        """Write raw bytes under `key` (run metadata that is not a message)."""
        with anyio.fail_after(self.settings.publish_deadline_s):
            while True:
                tried_at = time.monotonic()
                try:
                    kv = await self.js.key_value(bucket)
                    await kv.put(key, value)
                    return
                except RETRYABLE:
                    self.raise_if_denied(tried_at, subjects.kv_subject(bucket, key),
                                         containing=subjects.kv_stream(bucket))
                    await anyio.sleep(0.25)

    async def kv_get_bytes(self, bucket: str, key: str) -> bytes | None:
        """Read raw bytes under `key`, or None."""
        kv = await self.js.key_value(bucket)
        try:
            entry = await kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return entry.value

    async def kv_get(self, bucket: str, key: str, cls: type[M]) -> M | None:
        """Read `key`, or None if it is absent or deleted."""
        value = await self.kv_get_bytes(bucket, key)
        return decode(value, cls) if value else None

    async def kv_get_patiently(self, bucket: str, key: str, cls: type[M]) -> M | None:
        """`kv_get`, retrying through an outage; BusUnavailable after the publish deadline."""
        deadline = time.monotonic() + self.settings.publish_deadline_s
        while True:
            try:
                return await self.kv_get(bucket, key, cls)
            except RETRYABLE as exc:
                if time.monotonic() > deadline:
                    raise BusUnavailable(f"reading {bucket}/{key}: {exc!r}") from exc
                await anyio.sleep(0.25)

    async def kv_delete(self, bucket: str, key: str) -> None:
        """Delete `key` if present."""
        kv = await self.js.key_value(bucket)
        try:
            await kv.delete(key)
        except nats.js.errors.KeyNotFoundError:
            pass

    async def kv_items(self, bucket: str, cls: type[M], prefix: str = "") -> dict[str, M]:
        """Every live key (optionally under `prefix`) with its decoded value."""
        kv = await self.js.key_value(bucket)
        try:
            keys = await kv.keys()
        except nats.js.errors.NoKeysError:
            return {}
        out: dict[str, M] = {}
        for key in keys:
            if key.startswith(prefix):
                value = await self.kv_get(bucket, key, cls)
                if value is not None:
                    out[key] = value
        return out

    async def kv_watch(self, bucket: str, key: str, cls: type[M]) -> AsyncIterator[M]:
        """Yield the current value of `key` (if any), then every later update."""
        try:
            kv = await self.js.key_value(bucket)
            watcher = await kv.watch(key, ignore_deletes=True)
        except nats.errors.Error as exc:
            raise BusUnavailable(f"watch {bucket}/{key}: {exc!r}") from exc
        try:
            while True:
                try:
                    entry = await watcher.updates(timeout=30)
                except (nats.errors.TimeoutError, TimeoutError):
                    continue
                except nats.errors.Error as exc:
                    raise BusUnavailable(f"watch {bucket}/{key}: {exc!r}") from exc
                if entry is not None and entry.value:
                    yield decode(entry.value, cls)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await watcher.stop()
                except nats.errors.Error:
                    pass

