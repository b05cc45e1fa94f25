"""The NATS adapter: connection and durable publish; topology, KV and reads come as mixins.

Consumes typed messages and declarative topology from `bus.messages` and `bus.subjects`;
produces JetStream writes. `Bus` also carries the KV calls (`bus.nats_kv`) and the
read-only stream views (`bus.nats_reads`), topology (`bus.nats_topology`). Together with `bus.consumer` (pull loops) and
`bus.objects` (weights), these are the only modules that import `nats`, so a change of client touches `bus/` alone. It holds no domain logic and builds no
subject names.

Every call that leaves the process has a finite timeout. Publishing retries through a server
outage until `publish_deadline_s`, always with the same `Nats-Msg-Id`, so a retry is stored
once.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, TypeVar

import anyio
import nats
import nats.errors
import nats.js.errors
import structlog

from bus import subjects, tls
from bus.codec import encode
from bus.errors import BusError, BusUnavailable, PermissionDenied, TlsFailed
from bus.messages import Message
from bus.nats_kv import KeyValueCalls
from bus.nats_reads import StreamReads
from bus.nats_reclaim import StreamReclaim
from bus.nats_requests import RequestReplies
from bus.nats_retry import RETRYABLE, retry
from bus.nats_topology import StreamTopology

M = TypeVar("M", bound=Message)
log = structlog.get_logger("bus")

_VIOLATION = re.compile(r"permissions violation for (publish|subscription) to \"?([^\"\s]+)",
                        re.IGNORECASE)


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
    "One server's URL, or a cluster's, comma separated: the client fails over between them."
    user: str = ""
    password: str = ""
    token: str = ""
    creds_file: str = ""
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    "Client certificate (PEM) presented to a server that requires one; with `tls_key_file`."
    tls_key_file: str = ""
    connect_timeout_s: float = 30.0
    request_timeout_s: float = 5.0
    publish_deadline_s: float = 120.0
    ping_interval_s: float = 2.0
    ack_wait_s: float = 30.0
    max_deliver: int = 5
    duplicate_window_s: float = 600.0
    max_ack_pending: int = 1024
    replicas: int = 1
    "Copies of every stream, KV bucket and object store (1, or 3 on a cluster of 3 or more)."


class _ConnectionWatch:
    """The client's callbacks: refusals become `bus.permission_denied` events, a refused
    login stops the connect attempt, and errors while closing stay quiet, as do those of the
    first connect (kept in `connect_error`: the connect's own error names the last one)."""

    def __init__(self, settings: BusSettings) -> None:
        self.settings = settings
        self.closing = False
        self.denied: dict[str, float] = {}
        """Subjects the server refused (lowercased: nats-py lowercases the error text), with
        the monotonic time of the latest refusal."""
        self.login_refused = ""
        self.tls_refused: ssl.SSLError | None = None
        self.connecting: anyio.CancelScope | None = None
        self.connect_error = ""
        "The latest error while no connection was made yet."
        self.reconnects = 0
        "How often the connection came back: a watch opened before then is renewed."

    async def on_error(self, exc: Exception) -> None:
        text = str(exc)
        refused = _VIOLATION.search(text)
        if refused:
            operation = "publish" if refused[1].lower() == "publish" else "subscribe"
            self.denied[refused[2]] = time.monotonic()
            log.error("bus.permission_denied", operation=operation, subject=refused[2],
                      user=self.settings.user)
        elif "authorization violation" in text.lower() and self.connecting is not None:
            self.login_refused = text
            self.connecting.cancel()  # nats-py would retry a refused login forever
        elif isinstance(exc, ssl.SSLError) and tls.is_refusal(exc):
            if self.connecting is not None:
                self.tls_refused = exc
                self.connecting.cancel()  # a refused certificate stays refused
            else:
                s = self.settings  # a reconnect, to another node of a cluster perhaps
                log.error("bus.tls_failed",
                          error=tls.explain(exc, s.url, s.tls_ca_file, s.tls_cert_file))
        elif self.connecting is not None:
            self.connect_error = text or type(exc).__name__
        elif not self.closing:
            log.warning("bus.error", error=text or type(exc).__name__)

    async def on_disconnect(self) -> None:
        if not self.closing:
            log.warning("bus.disconnected")

    async def on_reconnect(self) -> None:
        self.reconnects += 1
        log.info("bus.reconnected")


def _client_options(settings: BusSettings, identity: Identity, watch: _ConnectionWatch) -> dict:
    options: dict = dict(
        servers=servers(settings.url),
        name=f"{identity.kind}:{identity.instance}",
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.25,
        ping_interval=settings.ping_interval_s,
        max_outstanding_pings=3,
        connect_timeout=min(5.0, settings.connect_timeout_s),
        error_cb=watch.on_error,
        disconnected_cb=watch.on_disconnect,
        reconnected_cb=watch.on_reconnect,
    )
    if settings.user:
        options.update(user=settings.user, password=settings.password,
                       inbox_prefix=subjects.inbox_prefix(settings.user))
    if settings.token:
        options.update(token=settings.token)
    if settings.creds_file:
        options.update(user_credentials=settings.creds_file)
    ssl_context = tls.context(settings.tls_ca_file, settings.tls_cert_file, settings.tls_key_file)
    if ssl_context is not None:
        options.update(tls=ssl_context)
    return options


class Bus(StreamTopology, KeyValueCalls, StreamReads, StreamReclaim, RequestReplies):
    """A connected client. Create with `await Bus.connect(settings, identity)`."""

    def __init__(self, nc: nats.NATS, settings: BusSettings, identity: Identity) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=settings.request_timeout_s)
        self.settings = settings
        self.identity = identity
        self.stats = ActorStats()
        self.stopping = anyio.Event()
        "Set when the process should stop taking new work and drain."
        self.watch = _ConnectionWatch(settings)
        "Connection-level news from the client: closing, refused subjects."

    @classmethod
    async def connect(cls, settings: BusSettings, identity: Identity) -> "Bus":
        """Connect within `connect_timeout_s`; reconnects forever afterwards.

        A login the server refuses raises PermissionDenied at once (nats-py itself would
        retry it forever), a refused TLS handshake or certificate file TlsFailed; no server
        within the timeout raises BusUnavailable, in one line naming the last error.
        """
        watch = _ConnectionWatch(settings)
        options = _client_options(settings, identity, watch)
        deadline = time.monotonic() + settings.connect_timeout_s

        async def attempt() -> "Bus":
            problem: Exception = TimeoutError(
                f"no connection within {settings.connect_timeout_s:.0f} s")
            with anyio.CancelScope(deadline=anyio.current_time()
                                   + max(0.0, deadline - time.monotonic())) as watch.connecting:
                try:
                    nc = await nats.connect(**options)
                    watch.connecting = None  # refusals on later reconnects are only logged
                    bus = cls(nc, settings, identity)
                    bus.watch = watch
                    return bus
                except (OSError, nats.errors.Error, TimeoutError) as exc:
                    problem = exc
            if watch.login_refused:
                raise PermissionDenied(f"NATS at {settings.url} refused the login of user "
                                       f"{settings.user or '(none)'}: {watch.login_refused}")
            if watch.tls_refused is not None:
                raise TlsFailed(tls.explain(watch.tls_refused, settings.url, settings.tls_ca_file,
                                            settings.tls_cert_file))
            if watch.connecting.cancelled_caught:  # the deadline passed: no retry is left
                raise BusUnavailable(f"no NATS server answered at {settings.url} within "
                                     f"{settings.connect_timeout_s:.0f} s (last error: "
                                     f"{watch.connect_error or 'none'})")
            raise problem

        return await retry(attempt, what=f"no NATS server at {settings.url}",
                           deadline_s=settings.connect_timeout_s, first_delay_s=0.1,
                           retry_on=(OSError, nats.errors.Error, TimeoutError))

    async def close(self) -> None:
        """Flush and close; shielded so a cancelled caller still leaves cleanly."""
        self.watch.closing = True
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(5):
                try:
                    await self.nc.drain()
                except (nats.errors.Error, OSError):
                    pass
            if not self.nc.is_closed:
                await self.nc.close()

    # --- publishing ----------------------------------------------------------------------

    async def publish(self, subject: str, msg: Message, *, msg_id: str,
                      when_full: Callable[[], Awaitable[int]] | None = None) -> bool:
        """Store `msg` durably on `subject`; True if the server already had `msg_id`.

        Retries through outages and full streams until `publish_deadline_s`, then raises
        BusUnavailable. A timed-out publish may have been stored; the retry's msg id makes
        the server drop the copy. `when_full` is awaited each time the stream refuses for
        lack of room (it may make room, returning how many messages it removed).
        """
        data = encode(msg)
        headers = {"Nats-Msg-Id": msg_id}

        async def publish_once() -> bool:
            ack = await self.js.publish(subject, data, headers=headers,
                                        timeout=self.settings.request_timeout_s)
            return bool(ack.duplicate)

        return await retry(publish_once, what=f"publish to {subject} failed",
                           deadline_s=self.settings.publish_deadline_s,
                           denied=lambda since: self.raise_if_denied(since, subject),
                           when_full=lambda: self._make_room(when_full, subject),
                           log_event="bus.publish_retried", subject=subject, msg_id=msg_id)

    async def _make_room(self, when_full: Callable[[], Awaitable[int]] | None, subject: str) -> bool:
        if when_full is None:
            return False
        try:
            return await when_full() > 0
        except (BusError, nats.errors.Error) as exc:
            log.warning("bus.make_room_failed", subject=subject, error=repr(exc))
            return False

    def raise_if_denied(self, since: float, subject: str, *, containing: str = "") -> None:
        """Raise PermissionDenied if, after `since`, the server refused this client `subject`
        (or any subject containing `containing`, such as a bucket's API calls).

        A refused request gets no reply, only an error on the connection, so a timeout on a
        refused subject is a refusal, not an outage to retry through.
        """
        # nats-py lowercases the server's error text, subject included.
        subject, containing = subject.lower(), containing.lower()
        refused = [x for x, at in self.watch.denied.items() if at >= since
                   and (x == subject or (containing and containing in x))]
        if refused:
            raise PermissionDenied(f"the server refused {', '.join(sorted(refused))} to user "
                                   f"{self.settings.user or '(none)'}")

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
                except (*RETRYABLE, nats.js.errors.APIError):
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



def servers(url: str) -> list[str]:
    """The server URLs in `url` (one, or several comma separated)."""
    found = [u.strip() for u in url.split(",") if u.strip()]
    if not found:
        raise BusError(f"no NATS URL in {url!r}: give one, or a cluster's comma separated")
    return found


def local_identity(kind: str, instance: str = "", run_id: str = "") -> Identity:
    """Identity for a process that is not a supervised actor (CLI, tests, benches)."""
    return Identity(kind, instance or f"{socket.gethostname()}-{os.getpid()}", run_id)
