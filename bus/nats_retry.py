"""Riding through a server outage, in one place: what is retried, how, and for how long.

Consumes a call to the server (or the opener of a watch or a following read) and a deadline;
produces the call's result, or `BusUnavailable` once the deadline has passed. Every bus
module that retries does it here (`retry` states the policy); the call sites only say what
they are doing and which extra cases they allow. `renewing` is the one place that reopens a
watch or a following read that the server lost (it restarted, or the connection came back).
Cancellation is never caught: only `Exception` is, and the sleeps are anyio's.
"""

from __future__ import annotations

import time
from contextlib import aclosing
from typing import AsyncIterator, Awaitable, Callable, TypeVar

import anyio
import nats.errors
import nats.js.errors
import structlog

from bus.errors import BusUnavailable

T = TypeVar("T")
log = structlog.get_logger("bus")

RETRYABLE = (
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
STREAM_FULL = {10077, 10047}  # maximum messages / bytes exceeded: back off and retry
STORAGE_EXHAUSTED = 10047  # on stream create: the server cannot reserve the stream's cap
REPLICAS_REFUSED = {10074, 10023, 10005}
("On stream create: replicas > 1 on a single server; too few cluster peers (insufficient "
 "resources; no suitable peers for placement).")


def is_outage(exc: BaseException, kinds: tuple[type[BaseException], ...] = RETRYABLE) -> bool:
    """True if `exc`, or every error of an exception group, is one of `kinds`."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(kinds)[1] is None
    return isinstance(exc, kinds)


def is_stream_full(exc: BaseException) -> bool:
    """True if the server refused a write because the stream is at its cap."""
    return isinstance(exc, nats.js.errors.APIError) and exc.err_code in STREAM_FULL


async def retry(call: Callable[[], Awaitable[T]], *, what: str, deadline_s: float,
                retry_on: tuple[type[BaseException], ...] = RETRYABLE,
                denied: Callable[[float], None] | None = None,
                when_full: Callable[[], Awaitable[bool]] | None = None,
                first_delay_s: float = 0.05, max_delay_s: float = 2.0,
                log_event: str = "", **log_fields: object) -> T:
    """`await call()` until it succeeds, retrying outages until `deadline_s` has passed.

    Retried: the errors that mean "the server is out of reach for now" (`RETRYABLE`, also when
    all the errors of an exception group are), with exponential backoff from `first_delay_s`,
    capped at `max_delay_s`, until `deadline_s` has passed; then `BusUnavailable` naming what
    was tried and the last error. Never retried: a refusal (the server answers a refused
    request with no reply, only an error on the connection, so it looks like a timeout:
    `denied(tried_at)` raises `PermissionDenied` if the server refused this client something
    since `tried_at`), any other error, or a full stream without `when_full`.

    `retry_on` widens what counts as an outage where a call site knows better (connecting,
    or waiting for a stream that is being created). With `when_full`, a full stream is retried
    too: `when_full()` is awaited first, and if it made room (True) the call is tried again at
    once. `log_event`, if set, is logged at each retry."""
    deadline = time.monotonic() + deadline_s
    delay = first_delay_s
    while True:
        tried_at = time.monotonic()
        try:
            return await call()
        except Exception as exc:  # noqa: BLE001 - sorted below; anything else is re-raised
            if when_full is not None and is_stream_full(exc):
                if await when_full():
                    continue
            elif is_outage(exc, retry_on):
                if denied is not None:
                    denied(tried_at)
            else:
                raise
            problem = exc
        if time.monotonic() + delay > deadline:
            raise BusUnavailable(f"{what}: {problem!r}") from problem
        if log_event:
            log.warning(log_event, error=repr(problem), **log_fields)
        await anyio.sleep(delay)
        delay = min(delay * 2, max_delay_s)


class Renew(Exception):
    """Raised inside a renewed iterator: the server lost it (restart, reconnect), open again."""


async def renewing(open_: Callable[[], AsyncIterator[T]], *, what: str,
                   first_delay_s: float = 0.25, max_delay_s: float = 2.0) -> AsyncIterator[T]:
    """Yield from `open_()`, and from a fresh `open_()` each time the one before fails on the
    bus (an outage, an error from the server, `BusUnavailable`, `Renew`), forever, with
    backoff between tries. An iterator that ends normally ends this one; any other error is
    raised. Each failure is logged as `bus.renewed` with `what`.
    """
    delay = first_delay_s
    while True:
        try:
            async with aclosing(open_()) as items:
                async for item in items:
                    delay = first_delay_s
                    yield item
            return
        except (Renew, BusUnavailable, OSError, *RETRYABLE, nats.errors.Error) as exc:
            log.warning("bus.renewed", what=what, error=repr(exc))
        await anyio.sleep(delay)
        delay = min(delay * 2, max_delay_s)
