"""What `whet tail` shows and how: its filter, `--since` and the line formats.

Consumes `Event`s; decides which ones `whet tail` prints (`TailFilter`: by level and
event-name glob, here; by actor kind, on the server through the subject filter), where the
replay starts (`parse_since`) and each line's form (`as_text`, `as_json`). No I/O.
"""

from __future__ import annotations

import fnmatch
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterator

import msgspec

from bus.messages import Event

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class TailFilter:
    """What `whet tail` shows."""

    actor: str | None = None
    event_glob: str | None = None
    level: str = "debug"

    def accepts(self, event: Event) -> bool:
        if self.actor and event.actor != self.actor:
            return False
        if LEVELS.get(event.level, 0) < LEVELS[self.level]:
            return False
        if self.event_glob and not fnmatch.fnmatchcase(event.event, self.event_glob):
            return False
        return True


def parse_since(text: str | None, now: float | None = None) -> float | None:
    """'30s', '5m', '2h', '1d' ago, or an ISO-8601 time; None means from the beginning."""
    if not text:
        return None
    now = time.time() if now is None else now
    match = _DURATION.match(text.strip())
    if match:
        return now - float(match[1]) * _UNIT_S[match[2]]
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--since {text!r}: expected like 30s, 5m, 2h, 1d or an ISO time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def as_json(event: Event) -> str:
    """One JSON line per event (the tag field dropped)."""
    data = msgspec.to_builtins(event)
    data.pop("t", None)
    return msgspec.json.encode(data).decode()


def as_text(event: Event) -> str:
    """One human line: time, level, instance, event, fields."""
    stamp = datetime.fromtimestamp(event.ts).strftime("%H:%M:%S.%f")[:-3]
    fields = " ".join(f"{k}={v!r}" if isinstance(v, str) and " " in v else f"{k}={v}"
                      for k, v in event.fields.items())
    return f"{stamp} {event.level:<7} {event.instance:<14} {event.event:<28} {fields}"


def filtered(events: Iterator[Event], flt: TailFilter) -> Iterator[Event]:
    return (e for e in events if flt.accepts(e))
