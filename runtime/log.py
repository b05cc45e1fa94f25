"""structlog set-up: one pipeline, three sinks (console, JSON-lines file, events stream).

Consumes log calls (`log.info("actor.started", ...)`) from every module; produces
- a line on stderr: pretty with local wall-clock times on a terminal (under the live status
  line, `runtime.terminal`), JSON with Unix seconds otherwise; a closed stderr never raises;
- a JSON line in `<run dir>/logs/<instance>.jsonl`;
- an `Event` on `whet.v1.events.<kind>.<instance>.<level>`, once a bus is attached.

Events wait in a bounded buffer for the bus; when it is full the oldest are dropped and
counted (the file still has them). A file write that fails (a full disk) never raises: the
line is counted as unwritten, one `log.file_unwritable` event says so, and once a write
succeeds again a `log.file_writable` event gives the count. It does not decide what to log.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, TextIO

import anyio
import msgspec
import structlog

from bus import subjects
from bus.codec import encode
from bus.messages import Event
from runtime.terminal import LineWriter, terminal

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_BUFFER = 10_000


class Refusals:
    """The rule for writes a disk may refuse (ENOSPC, EIO), shared by the event file here and
    the supervisor's metrics and plots (`runtime.stack.progress`): count each refused write,
    say so on the first, and once a write is taken again say how many were lost."""

    def __init__(self) -> None:
        self.count = 0
        "Writes refused since the last one taken."

    def refused(self) -> bool:
        """Count a refused write; True when it is the first (the one to say)."""
        self.count += 1
        return self.count == 1

    def taken(self) -> int:
        """A write was taken: the writes lost before it (0: nothing to say), count reset."""
        lost, self.count = self.count, 0
        return lost


class EventSink:
    """Buffers events for the bus and writes them to the JSON-lines file."""

    def __init__(self, kind: str, instance: str, run_id: str, file: TextIO | None) -> None:
        self.kind, self.instance, self.run_id = kind, instance, run_id
        self.file = file
        self.pending: deque[Event] = deque(maxlen=_BUFFER)
        self.dropped = 0
        self.refusals = Refusals()
        self.wake = anyio.Event()

    @property
    def unwritten(self) -> int:
        """Lines the file could not take (a full disk) since the last one it took."""
        return self.refusals.count

    def __call__(self, _logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        fields = {k: v for k, v in event.items()
                  if k not in ("event", "level", "timestamp", "actor", "instance", "run_id")}
        record = Event(ts=event.get("timestamp", time.time()), level=event.get("level", method),
                       event=str(event.get("event", "")), actor=self.kind,
                       instance=self.instance, run_id=self.run_id,
                       fields=_plain(fields))
        if self.file is not None:
            self._write(record)
        self._queue(record)
        return event

    def _queue(self, record: Event) -> None:
        if len(self.pending) == self.pending.maxlen:
            self.dropped += 1
        self.pending.append(record)
        self.wake.set()

    def _write(self, record: Event) -> None:
        """Append `record` to the file; on a failed write (ENOSPC, EIO) count it instead, and
        tell the bus once when the file stops and once when it takes lines again."""
        try:
            self.file.write(msgspec.json.encode(record).decode() + "\n")
            self.file.flush()
        except OSError as exc:
            if self.refusals.refused():
                self._queue(self._note(record, "warning", "log.file_unwritable", error=str(exc),
                                       file=getattr(self.file, "name", "")))
            return
        if self.refusals.count:
            self._queue(self._note(record, "info", "log.file_writable",
                                   unwritten=self.refusals.taken(),
                                   file=getattr(self.file, "name", "")))

    def _note(self, near: Event, level: str, name: str, **fields: Any) -> Event:
        return Event(ts=near.ts, level=level, event=name, actor=self.kind, instance=self.instance,
                     run_id=self.run_id, fields=fields)

    async def forward(self, bus: Any) -> None:
        """Publish buffered events to the bus until cancelled."""
        while True:
            await self.wake.wait()
            self.wake = anyio.Event()
            if not await self.forward_pending(bus):
                await anyio.sleep(0.5)
                self.wake.set()

    async def forward_pending(self, bus: Any) -> bool:
        """Publish what is buffered now; False if the bus refused (kept for later)."""
        while self.pending:
            record = self.pending[0]
            try:
                await bus.publish_core(
                    subjects.event_subject(record.actor, record.instance, record.level),
                    encode(record))
            except Exception:  # noqa: BLE001 - a down server must not break logging
                return False
            self.pending.popleft()
        try:
            await bus.nc.flush(timeout=2)
        except Exception:  # noqa: BLE001
            pass
        return True


def _plain(fields: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in fields.items():
        if isinstance(value, (str, int, float, bool)) or value is None:
            out[key] = value
        elif isinstance(value, (list, tuple)) and all(
                isinstance(v, (str, int, float, bool)) for v in value):
            out[key] = list(value)
        elif isinstance(value, dict):
            out[key] = _plain({str(k): v for k, v in value.items()})
        else:
            out[key] = str(value)
    return out


_sink: EventSink | None = None


def configure(*, kind: str, instance: str, run_id: str = "", level: str = "info",
              run_dir: Path | None = None, console: bool = True) -> EventSink:
    """Set up structlog for this process and bind `actor`, `instance`, `run_id`."""
    global _sink
    file = None
    if run_dir is not None:
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        file = open(run_dir / "logs" / f"{subjects.token(instance)}.jsonl", "a", buffering=1)
    _sink = EventSink(kind, instance, run_id, file)
    out = terminal()
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt=None, utc=True),
        structlog.processors.format_exc_info,
        _sink,  # the file and the bus get Unix seconds; people get a clock below
    ]
    if console and out.tty:
        processors += [_wall_clock, structlog.dev.ConsoleRenderer(colors=True)]
    else:
        processors.append(structlog.processors.JSONRenderer())
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=(structlog.WriteLoggerFactory(LineWriter(out)) if console  # type: ignore[arg-type]
                        else structlog.WriteLoggerFactory(open("/dev/null", "w"))),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(actor=kind, instance=instance, run_id=run_id)
    return _sink


def _wall_clock(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """Unix seconds as local time of day, to the millisecond (terminal lines only)."""
    ts = event.get("timestamp")
    if isinstance(ts, float):
        event["timestamp"] = time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts % 1 * 1000):03d}"
    return event


def sink() -> EventSink | None:
    """The sink `configure` installed, if any."""
    return _sink
