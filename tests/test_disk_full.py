"""A full disk under the run folder: what must write (logs, checkpoints) waits or counts what it
could not write, says so in one event, and goes on when space returns; nothing is killed or lost."""

from __future__ import annotations

import pytest


@pytest.mark.unit
def test_a_full_disk_under_the_log_file_never_raises_and_says_so_once(tmp_path):
    """Log lines that the disk refuses (ENOSPC, from /dev/full) are counted, one
    `log.file_unwritable` event goes to the bus, and when the file takes lines again a
    `log.file_writable` event gives the count; nothing raises into the actor (the supervisor
    died on such a write)."""
    from runtime.log import EventSink

    sink = EventSink("supervisor", "s1", "run", open("/dev/full", "w", buffering=1))
    for i in range(5):
        sink(None, "info", {"event": "x.happened", "i": i})
    notes = [e for e in sink.pending if e.event.startswith("log.")]
    assert sink.unwritten == 5
    assert [(e.event, e.level) for e in notes] == [("log.file_unwritable", "warning")]
    assert "No space left on device" in notes[0].fields["error"]
    sink.file = open(tmp_path / "s1.jsonl", "w", buffering=1)  # space is back
    sink(None, "info", {"event": "x.happened", "i": 5})
    back = [e for e in sink.pending if e.event == "log.file_writable"]
    assert [e.fields["unwritten"] for e in back] == [5] and sink.unwritten == 0
    assert '"i":5' in (tmp_path / "s1.jsonl").read_text()
