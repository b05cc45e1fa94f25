"""KV calls of the bus: typed values under keys, written through outages, watched.

Consumes messages (encoded with `bus.codec`) or raw bytes; produces entries in JetStream KV
buckets and decoded values read back. A mixin of `bus.nats_bus.Bus` (it uses the bus's
JetStream context, settings and refusal check); it creates no buckets.
"""

from __future__ import annotations

from typing import AsyncIterator, TypeVar

import anyio
import nats.errors
import nats.js.errors
import structlog
from nats.js.kv import KeyValue

from bus import subjects
from bus.codec import decode, encode
from bus.errors import WireError
from bus.messages import Message
from bus.nats_retry import Renew, renewing, retry

M = TypeVar("M", bound=Message)
log = structlog.get_logger("bus")
RENEW_CHECK_S = 2.0
"How often a quiet watch checks whether the connection came back since it was opened."
READ_INACTIVE_S = 5.0
"""Seconds the server keeps the consumer of a one-pass read (`kv_items`) after the read
stops: a status loop would otherwise leave one behind per call for nats-py's 5 minutes."""


class KeyValueCalls:
    """`kv_*` methods; mixed into `Bus`."""

    _buckets: dict[str, KeyValue] | None = None
    "Bucket handles by name, once found."

    async def _bucket(self, bucket: str) -> KeyValue:
        """The handle of `bucket`, looked up once per client: nats-py's lookup asks the
        server for the stream's info each time, which doubled the requests of every
        heartbeat (bench/scale/scale.py). A bucket not found yet is looked up again next time."""
        if self._buckets is None:
            self._buckets = {}
        kv = self._buckets.get(bucket)
        if kv is None:
            kv = self._buckets[bucket] = await self.js.key_value(bucket)
        return kv

    async def kv_put(self, bucket: str, key: str, msg: Message) -> None:
        """Write `msg` under `key`, retrying through an outage until the publish deadline."""
        await self.kv_put_bytes(bucket, key, encode(msg))

    async def kv_put_bytes(self, bucket: str, key: str, value: bytes) -> None:
        """Write raw bytes under `key` (run metadata that is not a message)."""

        async def put() -> None:
            kv = await self._bucket(bucket)
            await kv.put(key, value)

        await retry(put, what=f"put {bucket}/{key}", deadline_s=self.settings.publish_deadline_s,
                    denied=lambda since: self.raise_if_denied(
                        since, subjects.kv_subject(bucket, key),
                        containing=subjects.kv_stream(bucket)))

    async def kv_get_bytes(self, bucket: str, key: str) -> bytes | None:
        """Read raw bytes under `key`, or None."""
        kv = await self._bucket(bucket)
        try:
            entry = await kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return entry.value

    async def kv_get(self, bucket: str, key: str, cls: type[M]) -> M | None:
        """Read `key`, or None if it is absent or deleted."""
        value = await self.kv_get_bytes(bucket, key)
        return decode(value, cls) if value else None

    async def kv_delete(self, bucket: str, key: str) -> None:
        """Delete `key` if present."""
        kv = await self._bucket(bucket)
        try:
            await kv.delete(key)
        except nats.js.errors.KeyNotFoundError:
            pass

    async def kv_items(self, bucket: str, cls: type[M], prefix: str = "") -> dict[str, M]:
        """Every live key (optionally under `prefix`) with its decoded value.

        Read in one pass: one watch of the latest value of each key, ended at the last
        one, so the cost is a few requests whatever the number of keys. (A list of the keys
        and a get per key took two round trips per key: `whet status` over 1,000 actors'
        heartbeats took seconds.) A prefix ending in '.' is filtered on the server. The pass
        ends at the message the server sent last (nothing pending after it): nats-py's
        end-of-values marker can come first, when its consumer has sent every message before
        the client handled one, which a loaded machine hits; an empty pass is taken as the
        answer only where the server counts no key under the prefix.
        """
        kv = await self._bucket(bucket)
        watcher = await kv.watch(f"{prefix}>" if prefix.endswith(".") else ">",
                                 inactive_threshold=READ_INACTIVE_S)
        out: dict[str, M] = {}
        seen = False
        try:
            while True:
                entry = await watcher.updates(timeout=self.settings.request_timeout_s)
                if entry is None:
                    if seen or not await self._holds_keys(bucket, prefix):
                        break
                    continue  # the marker came before the messages already on their way
                seen = True
                if entry.value and entry.key.startswith(prefix):  # a deleted key has none
                    out[entry.key] = decode(entry.value, cls)
                if not entry.delta:
                    break
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await watcher.stop()
                except nats.errors.Error:
                    pass
        return out

    async def _holds_keys(self, bucket: str, prefix: str) -> bool:
        """Whether the bucket's stream holds a message under `prefix` (counted by the server
        for a prefix ending in '.', else for the whole bucket; a deleted key's marker counts)."""
        server_side = prefix.endswith(".")
        info = await self.js.stream_info(
            f"KV_{bucket}", subjects_filter=f"$KV.{bucket}.{prefix}>" if server_side else None)
        return bool(info.state.subjects) if server_side else info.state.messages > 0

    async def kv_watch(self, bucket: str, key: str, cls: type[M]) -> AsyncIterator[M]:
        """Yield the current value of `key` (if any), then every later update, for good.

        The watch is renewed (`bus.nats_retry.renewing`) when the server goes away or the
        connection comes back, and a renewed watch yields the current value again: a reader
        must take a value it has seen before as a no-op. `key` may hold wildcards.
        """
        async for value in renewing(lambda: self._watch_once(bucket, key, cls),
                                    what=f"watch {bucket}/{key}"):
            yield value

    async def _watch_once(self, bucket: str, key: str, cls: type[M]) -> AsyncIterator[M]:
        """One watch, until the connection is lost or comes back (then `Renew`)."""
        reconnects = self.watch.reconnects
        kv = await self._bucket(bucket)
        watcher = await kv.watch(key, ignore_deletes=True)
        try:
            while True:
                try:
                    entry = await watcher.updates(timeout=RENEW_CHECK_S)
                except (nats.errors.TimeoutError, TimeoutError):
                    # The server forgets the watch's consumer when it restarts; the client
                    # re-creates it only if its heartbeat task survived the outage.
                    if self.watch.reconnects != reconnects:
                        raise Renew("the connection came back") from None
                    continue
                if entry is None or not entry.value:
                    continue
                try:
                    value = decode(entry.value, cls)
                except WireError as exc:  # renewing would read it again: pass it by
                    log.warning("bus.kv_value_unreadable", bucket=bucket, key=entry.key,
                                error=str(exc))
                    continue
                yield value
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await watcher.stop()
                except nats.errors.Error:
                    pass
