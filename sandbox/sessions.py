"""The sessions one executor holds: open, call and close requests answered, idle ones reaped.

Consumes `SessionRequest`s (from the judge, through `bus.nats_requests`); produces
`SessionReply`s. Each session is a `sandbox.session.Session` on a workspace restored from
this executor's `WorkspaceCache`. Opening a session id twice returns the one already open;
a repeated call step is answered from the session's record; a repeated close is answered
from a short memory of closed sessions, so a judge that handles an attempt twice gets the
same answers. A session idle for `idle_s` is closed (its judge is gone); when the executor
stops, every session is closed. A request for a session this process does not hold (its
owner restarted) gets `ok=False`: the judge drops that attempt as an infrastructure fault.
It does not judge or parse model text.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import anyio
import structlog

from bus.messages import SessionReply, SessionRequest
from sandbox.session import Session, open_session
from sandbox.workspace import WorkspaceCache, digest_of

log = structlog.get_logger("sandbox.sessions")
CLOSED_KEPT = 256
"Closed sessions whose close reply is remembered."


class SessionHost:
    """An executor's open tool-episode sessions, by session id, with a short memory of closed
    ones, so a judge that handles an attempt twice gets the same reply."""

    def __init__(self, backend, cache: WorkspaceCache, instance: str, idle_s: float = 600.0) -> None:
        self.backend, self.cache, self.instance, self.idle_s = backend, cache, instance, idle_s
        self.sessions: dict[str, tuple[Session, float]] = {}
        self.closed: OrderedDict[str, SessionReply] = OrderedDict()
        self.locks: dict[str, anyio.Lock] = {}
        self.counts = {"opened": 0, "calls": 0, "closed": 0, "reaped": 0, "setup_s": 0.0}

    def reply(self, request: SessionRequest, **fields) -> SessionReply:
        return SessionReply(session_id=request.session_id, executor=self.instance, **fields)

    async def handle(self, request: SessionRequest) -> SessionReply:
        lock = self.locks.setdefault(request.session_id, anyio.Lock())
        async with lock:  # one request of a session at a time
            if request.op == "open":
                return await self.open(request)
            if request.op == "close" and request.session_id in self.closed:
                return self.closed[request.session_id]
            held = self.sessions.get(request.session_id)
            if held is None:
                return self.reply(request, ok=False, error=f"no session {request.session_id} on "
                                  f"executor {self.instance} (it restarted, or the session idled out)")
            session = held[0]
            self.sessions[request.session_id] = (session, time.monotonic())
            if request.op == "call" and request.call is not None:
                self.counts["calls"] += 1
                return self.reply(request, result=await session.call(request.call, request.step))
            return self.close(request, session)

    async def open(self, request: SessionRequest) -> SessionReply:
        held = self.sessions.get(request.session_id)
        if held is None:
            if request.task is None:
                return self.reply(request, ok=False, error="open needs the task")
            try:
                session = await open_session(self.cache, self.backend, request.task)
            except (OSError, RuntimeError, ValueError) as exc:  # the workspace could not be set up
                log.warning("session.open_failed", session_id=request.session_id, error=repr(exc))
                return self.reply(request, ok=False, error=f"the workspace could not be set up: {exc!r}"[:500])
            self.sessions[request.session_id] = (session, time.monotonic())
            self.counts["opened"] += 1
            self.counts["setup_s"] += session.setup_s
            log.info("session.opened", session_id=request.session_id,
                     setup_s=round(session.setup_s, 4), task_id=request.task.task_id)
        session = self.sessions[request.session_id][0]
        prepared = session.workspace.prepared
        return self.reply(request, digest=session.opened, setup_s=session.setup_s,
                          visible_passed=int(prepared.get("visible_passed", -1)),
                          visible_total=int(prepared.get("visible_total", -1)))

    def close(self, request: SessionRequest, session: Session) -> SessionReply:
        refused = list(session.workspace.refused)
        files = session.close()
        del self.sessions[request.session_id]
        self.locks.pop(request.session_id, None)
        answer = self.reply(request, files=files, refused=refused, digest=digest_of(files))
        self.closed[request.session_id] = answer
        while len(self.closed) > CLOSED_KEPT:
            self.closed.popitem(last=False)
        self.counts["closed"] += 1
        return answer

    def reap_idle(self, now: float | None = None) -> int:
        """Close sessions idle longer than `idle_s`; how many."""
        now = time.monotonic() if now is None else now
        stale = [sid for sid, (_, used) in self.sessions.items() if now - used > self.idle_s]
        for sid in stale:
            session, _ = self.sessions.pop(sid)
            session.close()
            log.warning("session.reaped", session_id=sid, idle_s=self.idle_s)
        self.counts["reaped"] += len(stale)
        return len(stale)

    def close_all(self) -> None:
        for session, _ in self.sessions.values():
            session.close()
        self.sessions.clear()
        self.cache.close()

