"""Which live actor processes stopped beating: `actor.unresponsive`, then `actor.responsive`.

Consumes the heartbeats (KV whet-actors) and the supervisor's running processes; produces
one `actor.unresponsive` warning (instance, pid, seconds since its last beat) when a process
that has beaten under its own pid stays silent past `Heartbeat.silence_limit_s` (the rule
`whet status` marks a process dead by) while the bus answers, and one
`actor.responsive` when it beats again. It kills and restarts nothing: a paused (SIGSTOP) or
stuck process is told about, not punished; a process that exits is the supervisor's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from bus.messages import Heartbeat

@dataclass
class Liveness:
    """The processes found silent, from one look at the heartbeats to the next."""

    silent: dict[str, tuple[int, float]] = field(default_factory=dict)
    "Instance -> (pid, its last beat's time) of each process told unresponsive."

    def look(self, running: dict[str, int], beats: Iterable[Heartbeat], now: float,
             answering_since: float) -> list[tuple[str, dict]]:
        """Events (name, fields) for a look at `beats` at `now`: `running` maps instance to
        pid; a beat counts as old only from `answering_since`, when the bus last came back
        (no actor can beat through an outage)."""
        out: list[tuple[str, dict]] = []
        by_instance = {b.instance: b for b in beats}
        for instance in [i for i in self.silent if running.get(i) != self.silent[i][0]]:
            del self.silent[instance]  # exited or replaced: the supervisor tells that
        for instance, pid in running.items():
            beat = by_instance.get(instance)
            if beat is None or beat.pid != pid or beat.state == "stopped":
                continue  # not beating yet under this pid
            limit = beat.silence_limit_s
            quiet_s = now - max(beat.beat_at, answering_since)
            if instance in self.silent:
                last = self.silent[instance][1]
                if beat.beat_at > last:
                    del self.silent[instance]
                    out.append(("actor.responsive", dict(kind=beat.kind, child=instance, pid=pid,
                                                         silent_s=round(beat.beat_at - last, 1))))
            elif quiet_s > limit:
                self.silent[instance] = (pid, beat.beat_at)
                out.append(("actor.unresponsive", dict(
                    kind=beat.kind, child=instance, pid=pid,
                    since_beat_s=round(now - beat.beat_at, 1), limit_s=limit)))
        return out
