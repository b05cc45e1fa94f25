"""Request and reply over core NATS, for work bound to one live process (a tool episode's
session, held by one executor).

Consumes typed requests and a handler; produces typed replies. `request` answers None when
no one answers within its timeout (nobody serves the subject, or its server died): for
session work that is the expected outcome "the owner is gone", a value, not an error.
`serve` handles a subject's requests (in a queue group when one is named) with at most
`limit` at once until `stopping` is set. Nothing here is durable: state that must survive a
process belongs in JetStream. A mixin of `bus.nats_bus.Bus`.
"""

from __future__ import annotations

from typing import Awaitable, Callable, TypeVar

import anyio
import nats.errors
import structlog
from anyio.abc import TaskStatus

from bus.codec import decode, encode
from bus.messages import Message

M = TypeVar("M", bound=Message)
R = TypeVar("R", bound=Message)
log = structlog.get_logger("bus")


class RequestReplies:
    """The `Bus` calls of core request/reply: ask with a timeout, and serve a subject."""

    nc: object
    stopping: anyio.Event

    async def request(self, subject: str, msg: Message, reply: type[R], *,
                      timeout_s: float) -> R | None:
        """Send `msg` and wait for one reply; None when nobody answered in `timeout_s`."""
        try:
            with anyio.fail_after(timeout_s + 1.0):
                answer = await self.nc.request(subject, encode(msg), timeout=timeout_s)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError, TimeoutError):
            return None
        return decode(answer.data, reply)

    async def serve(self, subject: str, cls: type[M], handler: Callable[[M], Awaitable[Message]],
                    *, queue: str = "", limit: int = 8,
                    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Answer every request on `subject` with `handler`'s reply until `stopping` is set."""
        sub = await self.nc.subscribe(subject, queue=queue)
        slots = anyio.Semaphore(limit)

        async def answer(raw) -> None:
            try:
                reply = await handler(decode(raw.data, cls))
            except Exception as exc:  # noqa: BLE001 - a bad request gets no answer, the caller times out
                log.warning("bus.request_failed", subject=subject, error=repr(exc))
                return
            finally:
                slots.release()
            await raw.respond(encode(reply))

        try:
            async with anyio.create_task_group() as tg:
                task_status.started()

                async def until_stopping() -> None:
                    await self.stopping.wait()
                    tg.cancel_scope.cancel()
                tg.start_soon(until_stopping)
                async for raw in sub.messages:
                    await slots.acquire()
                    tg.start_soon(answer, raw)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await sub.unsubscribe()
                except nats.errors.Error:
                    pass
