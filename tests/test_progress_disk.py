"""Metrics and plots on a full disk: the supervisor's progress writer counts what the disk
refuses and says so once, and never raises (a plot write on a full disk killed the supervisor)."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs


@pytest.mark.unit
def test_a_csv_row_the_disk_refuses_is_counted_said_once_and_the_next_one_lands(tmp_path):
    from runtime.stack.progress import CsvLog

    log = CsvLog(tmp_path / "metrics" / "train.csv", ["step", "loss"])
    good = log.path
    log.path = Path("/dev/full")  # every write: ENOSPC
    with capture_logs() as events:
        for step in range(3):
            log.append({"step": step, "loss": 0.5})
        assert log.guard.unwritten == 3
        log.path = good  # space is back
        log.append({"step": 3, "loss": 0.25})
    said = [(e["event"], e.get("unwritten")) for e in events if e["event"].startswith("progress.")]
    assert said == [("progress.file_unwritable", None), ("progress.file_writable", 3)]
    assert "No space left on device" in events[0]["error"]
    assert good.read_text().splitlines() == ["step,loss", "3,0.25"]


@pytest.mark.unit
def test_a_csv_log_whose_folder_cannot_be_made_does_not_raise(tmp_path):
    from runtime.stack.progress import CsvLog

    (tmp_path / "metrics").write_text("a file where the folder should be\n")
    log = CsvLog(tmp_path / "metrics" / "train.csv", ["step"])
    log.append({"step": 1})
    assert log.guard.unwritten == 2


@pytest.mark.unit
def test_plots_the_disk_refuses_return_nothing_and_raise_nothing(tmp_path):
    from runtime.stack.plots import draw
    from runtime.stack.progress import CsvLog, Unwritable

    CsvLog(tmp_path / "metrics" / "train.csv", ["step", "mean_reward"]).append(
        {"step": 1, "mean_reward": 0.1})
    (tmp_path / "plots").write_text("a file where the plots folder should be\n")
    guard = Unwritable("plots")
    assert guard.run(draw, tmp_path) is None and guard.unwritten == 1
    (tmp_path / "plots").unlink()
    assert guard.run(draw, tmp_path) and guard.unwritten == 0
