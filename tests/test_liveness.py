"""The supervisor's liveness look: a silent process is told once, and again when it beats."""

from __future__ import annotations

import pytest

from bus.messages import Heartbeat
from runtime.stack.liveness import Liveness

pytestmark = pytest.mark.unit


def beat(at: float, pid: int = 10, state: str = "ready") -> Heartbeat:
    return Heartbeat(kind="judge", instance="judge-1", pid=pid, host="h", state=state,
                     started_at=0.0, beat_at=at, interval_s=1.0)


def names(events) -> list[str]:
    return [name for name, _ in events]


def test_a_paused_process_is_unresponsive_once_then_responsive():
    """Three missed beats give one `actor.unresponsive`; its next beat one `actor.responsive`."""
    live = Liveness()
    assert live.look({"judge-1": 10}, [beat(100.0)], 102.0, 0.0) == []
    [(name, fields)] = live.look({"judge-1": 10}, [beat(100.0)], 103.5, 0.0)
    assert (name, fields["pid"], fields["since_beat_s"]) == ("actor.unresponsive", 10, 3.5)
    assert live.look({"judge-1": 10}, [beat(100.0)], 110.0, 0.0) == []
    [(name, fields)] = live.look({"judge-1": 10}, [beat(111.0)], 111.2, 0.0)
    assert (name, fields["silent_s"]) == ("actor.responsive", 11.0)
    assert live.look({"judge-1": 10}, [beat(112.0)], 112.5, 0.0) == []


def test_an_outage_or_a_new_process_is_not_unresponsive():
    """Beats are old from when the bus came back; a new pid's old beat, or a stopped one,
    says nothing; an unresponsive process that exits is forgotten without an event."""
    live = Liveness()
    assert live.look({"judge-1": 10}, [beat(100.0)], 110.0, 108.0) == []
    assert live.look({"judge-1": 11}, [beat(100.0)], 110.0, 0.0) == []
    assert live.look({"judge-1": 10}, [beat(100.0, state="stopped")], 110.0, 0.0) == []
    assert names(live.look({"judge-1": 10}, [beat(100.0)], 110.0, 0.0)) == ["actor.unresponsive"]
    assert live.look({}, [beat(100.0)], 111.0, 0.0) == [] and live.silent == {}
