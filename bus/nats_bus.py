"""The NATS adapter: connection, durable publish, topology, KV and stream state.

Consumes typed messages and declarative topology from `bus.messages` and `bus.subjects`;
produces JetStream writes, KV entries and snapshots of stream state. Together with
`bus.consumer` (pull loops) and `bus.objects` (weights), it is the only code that imports
`nats`, so a change of client touches `bus/` alone. It holds no domain logic and builds no
subject names.

Every call that leaves the process has a finite timeout. Publishing retries through a server
outage until `publish_deadline_s`, always with the same `Nats-Msg-Id`, so a retry is stored
once.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, TypeVar

import anyio
import nats
import nats.errors
import nats.js.errors
import structlog
from nats.js import api

from bus import subjects
from bus.codec import decode, encode
from bus.errors import BusUnavailable
from bus.messages import Message

M = TypeVar("M", bound=Message)
log = structlog.get_logger("bus")

_RETRYABLE = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    TimeoutError,
)
_STREAM_FULL = {10077, 10047}  # maximum messages / bytes exceeded: back off and retry


@dataclass
class Identity:
    """Who is on the bus: used for heartbeats, event subjects and connection names."""

    kind: str
    instance: str
    run_id: str = ""
    run_dir: str = ""
    "Run directory on this host, where a local process may write metrics; '' if none."


@dataclass
class ActorStats:
    """Gauges an actor updates and its heartbeat reports."""

    processed: int = 0
    in_flight: int = 0
    policy_version: int = -1
    gauges: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class BusSettings:
    """How to reach the server and how patient to be with it."""

    url: str
    user: str = ""
    password: str = ""
    token: str = ""
    creds_file: str = ""
    tls_ca_file: str = ""
    connect_timeout_s: float = 30.0
    request_timeout_s: float = 5.0
    publish_deadline_s: float = 120.0
    ping_interval_s: float = 2.0
    ack_wait_s: float = 30.0
    max_deliver: int = 5
    duplicate_window_s: float = 600.0
    max_ack_pending: int = 1024


@dataclass
class StreamState:
    """Depth and redelivery counts of one stream and its consumers."""

    name: str
    messages: int
    bytes: int
    consumers: dict[str, dict[str, int]]


class Bus:
    """A connected client. Create with `await Bus.connect(settings, identity)`."""

    def __init__(self, nc: nats.NATS, settings: BusSettings, identity: Identity) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=settings.request_timeout_s)
        self.settings = settings
        self.identity = identity
        self.stats = ActorStats()
        self.stopping = anyio.Event()
        "Set when the process should stop taking new work and drain."
        self._closing = {"now": False}

    @classmethod
    async def connect(cls, settings: BusSettings, identity: Identity) -> "Bus":
        """Connect, retrying until `connect_timeout_s`; reconnects forever afterwards."""
        closing = {"now": False}

        async def on_error(exc: Exception) -> None:
            if not closing["now"]:
                log.warning("bus.error", error=str(exc) or type(exc).__name__)

        async def on_disconnect() -> None:
            if not closing["now"]:
                log.warning("bus.disconnected")

        async def on_reconnect() -> None:
            log.info("bus.reconnected")

        options: dict = dict(
            servers=[settings.url],
            name=f"{identity.kind}:{identity.instance}",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.25,
            ping_interval=settings.ping_interval_s,
            max_outstanding_pings=3,
            connect_timeout=min(5.0, settings.connect_timeout_s),
            error_cb=on_error,
            disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect,
        )
        if settings.user:
            options.update(user=settings.user, password=settings.password)
        if settings.token:
            options.update(token=settings.token)
        if settings.creds_file:
            options.update(user_credentials=settings.creds_file)
        if settings.tls_ca_file:
            import ssl

            options.update(tls=ssl.create_default_context(cafile=settings.tls_ca_file))
        deadline = time.monotonic() + settings.connect_timeout_s
        delay = 0.1
        while True:
            try:
                nc = await nats.connect(**options)
                bus = cls(nc, settings, identity)
                bus._closing = closing
                return bus
            except nats.errors.AuthorizationError:
                raise
            except (OSError, nats.errors.Error, TimeoutError) as exc:
                if time.monotonic() + delay > deadline:
                    raise BusUnavailable(f"no NATS server at {settings.url}: {exc}") from exc
                await anyio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def close(self) -> None:
        """Flush and close; shielded so a cancelled caller still leaves cleanly."""
        self._closing["now"] = True
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(5):
                try:
                    await self.nc.drain()
                except (nats.errors.Error, OSError):
                    pass
            if not self.nc.is_closed:
                await self.nc.close()

    # --- topology ------------------------------------------------------------------------

    async def ensure_topology(self, specs: list[subjects.StreamSpec]) -> None:
        """Create or update every stream, KV bucket and the weights object store."""
        for spec in specs:
            await self._ensure_stream(spec)
        for bucket, max_age in (
            (subjects.BUCKET_POLICY, 0.0),
            (subjects.BUCKET_ACTORS, 3600.0),
            (subjects.BUCKET_RUN, 0.0),
        ):
            await self.js.create_key_value(
                api.KeyValueConfig(bucket=bucket, history=1, ttl=max_age or None,
                                   storage=api.StorageType.FILE)
            )
        await self.js.create_object_store(
            subjects.BUCKET_WEIGHTS,
            api.ObjectStoreConfig(storage=api.StorageType.FILE),
        )

    async def _ensure_stream(self, spec: subjects.StreamSpec) -> None:
        config = api.StreamConfig(
            name=spec.name,
            subjects=list(spec.subjects),
            retention=(api.RetentionPolicy.WORK_QUEUE if spec.retention == "workqueue"
                       else api.RetentionPolicy.LIMITS),
            storage=api.StorageType.FILE,
            max_age=spec.max_age_s or None,
            max_bytes=spec.max_bytes,
            discard=api.DiscardPolicy.NEW if spec.discard_new else api.DiscardPolicy.OLD,
            duplicate_window=self.settings.duplicate_window_s,
        )
        try:
            await self.js.add_stream(config)
        except nats.js.errors.BadRequestError:
            await self.js.update_stream(config)

    async def ensure_consumer(self, spec: subjects.ConsumerSpec, *, ack_wait_s: float | None = None,
                              max_deliver: int | None = None) -> None:
        """Create the durable pull consumer if it does not exist yet."""
        config = api.ConsumerConfig(
            durable_name=spec.durable,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=ack_wait_s or self.settings.ack_wait_s,
            max_deliver=max_deliver or self.settings.max_deliver,
            filter_subject=spec.filter_subject,
            max_ack_pending=self.settings.max_ack_pending,
        )
        try:
            await self.js.consumer_info(spec.stream, spec.durable)
        except nats.js.errors.NotFoundError:
            await self.js.add_consumer(spec.stream, config)

    # --- publishing ----------------------------------------------------------------------

    async def publish(self, subject: str, msg: Message, *, msg_id: str) -> bool:
        """Store `msg` durably on `subject`; True if the server already had `msg_id`.

        Retries through outages and full streams until `publish_deadline_s`, then raises
        BusUnavailable. A timed-out publish may have been stored; the retry's msg id makes
        the server drop the copy.
        """
        data = encode(msg)
        headers = {"Nats-Msg-Id": msg_id}
        deadline = time.monotonic() + self.settings.publish_deadline_s
        delay = 0.05
        while True:
            try:
                ack = await self.js.publish(subject, data, headers=headers,
                                            timeout=self.settings.request_timeout_s)
                return bool(ack.duplicate)
            except nats.js.errors.APIError as exc:
                if exc.err_code not in _STREAM_FULL:
                    raise
                problem: Exception = exc
            except _RETRYABLE as exc:
                problem = exc
            if time.monotonic() + delay > deadline:
                raise BusUnavailable(f"publish to {subject} failed: {problem!r}")
            log.warning("bus.publish_retried", subject=subject, msg_id=msg_id,
                        error=repr(problem))
            await anyio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def publish_many(self, subject: str, items: list[tuple[str, Message]]) -> int:
        """Store many messages with pipelined acks; returns how many were new.

        Each item is (msg_id, message). Items whose ack fails are retried one by one through
        `publish`, so the whole batch is stored or BusUnavailable is raised.
        """
        futures = []
        for msg_id, msg in items:
            fut = await self.js.publish_async(subject, encode(msg),
                                              headers={"Nats-Msg-Id": msg_id})
            futures.append((msg_id, msg, fut))
        new, done = 0, 0
        retry = []
        with anyio.move_on_after(self.settings.request_timeout_s):
            for msg_id, msg, fut in futures:
                try:
                    new += not (await fut).duplicate
                except (*_RETRYABLE, nats.js.errors.APIError):
                    retry.append((msg_id, msg))
                done += 1
        for msg_id, msg, fut in futures[done:]:  # acks that did not come in time
            fut.cancel()
            retry.append((msg_id, msg))
        for msg_id, msg in retry:
            new += not await self.publish(subject, msg, msg_id=msg_id)
        return new

    async def publish_core(self, subject: str, data: bytes) -> None:
        """Fire-and-forget publish (events); lost if the server is down."""
        await self.nc.publish(subject, data)

    # --- key-value -------------------------------------------------------------------------

    async def kv_put(self, bucket: str, key: str, msg: Message) -> None:
        """Write `msg` under `key`, retrying through an outage until the publish deadline."""
        await self.kv_put_bytes(bucket, key, encode(msg))

    async def kv_put_bytes(self, bucket: str, key: str, value: bytes) -> None:
        """Write raw bytes under `key` (run metadata that is not a message)."""
        kv = await self.js.key_value(bucket)
        with anyio.fail_after(self.settings.publish_deadline_s):
            while True:
                try:
                    await kv.put(key, value)
                    return
                except _RETRYABLE:
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
        kv = await self.js.key_value(bucket)
        watcher = await kv.watch(key, ignore_deletes=True)
        try:
            while True:
                try:
                    entry = await watcher.updates(timeout=30)
                except (nats.errors.TimeoutError, TimeoutError):
                    continue
                if entry is not None and entry.value:
                    yield decode(entry.value, cls)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await watcher.stop()
                except nats.errors.Error:
                    pass

    # --- observing -------------------------------------------------------------------------

    async def replay(self, stream: str, filter_subject: str, cls: type[M], *,
                     since: float | None = None, follow: bool = True,
                     batch: int = 256) -> AsyncIterator[tuple[str, M | None, bytes]]:
        """Read `stream` without consuming it: (subject, message or None, raw payload).

        Starts at Unix time `since` (or the beginning); with `follow=False` it stops once
        caught up. Payloads that do not decode come back with message None.
        """
        import datetime as dt

        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE, inactive_threshold=60.0, mem_storage=True,
            deliver_policy=(api.DeliverPolicy.BY_START_TIME if since else api.DeliverPolicy.ALL),
            opt_start_time=(dt.datetime.fromtimestamp(since, dt.timezone.utc).isoformat()
                            if since else None))
        sub = await self.js.pull_subscribe(filter_subject, stream=stream, config=config)
        try:
            while True:
                try:
                    msgs = await sub.fetch(batch, timeout=1.0)
                except (nats.errors.TimeoutError, TimeoutError):
                    if not follow:
                        return
                    continue
                for msg in msgs:
                    try:
                        value: M | None = decode(msg.data, cls)
                    except Exception:  # noqa: BLE001 - shown raw to the reader
                        value = None
                    yield msg.subject, value, msg.data
                if not follow and msgs and msgs[-1].metadata.num_pending == 0:
                    return
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await sub.unsubscribe()
                except nats.errors.Error:
                    pass

    async def snapshot(self, stream: str, cls: type[M]) -> list[tuple[int, M | None]]:
        """Every message stored in `stream` now, by sequence, without a consumer.

        Works on work-queue streams too (which allow no second consumer); for audits and
        tests, not hot paths: one request per message.
        """
        info = await self.js.stream_info(stream)
        out: list[tuple[int, M | None]] = []
        if not info.state.messages:
            return out
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                raw = await self.js.get_msg(stream, seq)
            except nats.js.errors.NotFoundError:
                continue
            try:
                out.append((seq, decode(raw.data or b"", cls)))
            except Exception:  # noqa: BLE001 - shown as undecodable
                out.append((seq, None))
        return out

    # --- state -----------------------------------------------------------------------------

    async def stream_states(self, names: list[str]) -> list[StreamState]:
        """Depth of each stream and, per durable consumer, pending, in-flight and redelivered."""
        out = []
        for name in names:
            try:
                info = await self.js.stream_info(name)
            except nats.js.errors.NotFoundError:
                continue
            consumers = {}
            for c in await self.js.consumers_info(name):
                consumers[c.name] = {
                    "pending": c.num_pending or 0,
                    "in_flight": c.num_ack_pending or 0,
                    "redelivered": c.num_redelivered or 0,
                }
            out.append(StreamState(name, info.state.messages, info.state.bytes, consumers))
        return out


def local_identity(kind: str, instance: str = "", run_id: str = "") -> Identity:
    """Identity for a process that is not a supervised actor (CLI, tests, benches)."""
    return Identity(kind, instance or f"{socket.gethostname()}-{os.getpid()}", run_id)
