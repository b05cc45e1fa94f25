"""Watching for hacks in a run: per-class hack rates, their alerts, and the trials each alert
names, computed by pure functions and checked against values worked out by hand."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from rich.console import Console

from monitoring import metrics, prometheus
from monitoring.alerts import (
    REWARD_VS_HELDOUT,
    AlertBook,
    HeldoutSeries,
    check_alerts,
    linked_trials,
)
from monitoring.config import Band, MonitorConfig
from monitoring.metrics import VerdictPoint
from monitoring.snapshot import Window, build_snapshot
from runtime.cli.render_metrics import render_metrics

pytestmark = pytest.mark.unit


def _p(i: int, outcome: str, cause: str = "", reward: float | None = 0.0, at: float = 100.0,
       purpose: str = "train") -> VerdictPoint:
    return VerdictPoint(at=at, purpose=purpose, outcome=outcome, cause=cause, reward=reward,
                        verdict_id=f"v{i}")


WINDOW = ([_p(0, "hack", "hack.early_exit", -1.0, at=101), _p(1, "hack", "hack.early_exit", -1.0, at=103),
           _p(2, "hack", "hack.tamper", -1.0, at=102), _p(3, "hack", "", -1.0, at=104)]
          + [_p(i, "pass", reward=1.0, at=100 + i) for i in (4, 5, 6)]
          + [_p(7, "fail", "model.wrong_answer", 0.4, at=107), _p(8, "fail", "model.timeout", 0.1),
             _p(9, "pass", reward=1.0, at=90, purpose="eval")])
"10 verdicts: hacks 2 early_exit, 1 tamper, 1 without a class; 4 passes (one eval)."


def test_each_hack_class_has_its_own_rate():
    """4 hacks in 10 verdicts: hack_rate 0.4, early_exit 0.2, tamper 0.1, unknown 0.1."""
    rates = metrics.rates(WINDOW)
    assert rates["hack_rate"] == 0.4
    assert {k: v for k, v in rates.items() if k.startswith("hack_rate.")} == {
        "hack_rate.early_exit": 0.2, "hack_rate.tamper": 0.1, "hack_rate.unknown": 0.1}
    assert metrics.hack_class_rates([_p(0, "pass")]) == {}


def test_alerts_name_the_trials_that_drove_them():
    """Top rewards: v6, v5, v4 (1.0, latest first), then v7 (0.4); latest hacks: v3, v1, v2, v0;
    early_exit: v1, v0."""
    assert metrics.top_reward_trials(WINDOW, 4) == ["v6", "v5", "v4", "v7"]
    assert metrics.hack_trials(WINDOW, None, 10) == ["v3", "v1", "v2", "v0"]
    assert metrics.hack_trials(WINDOW, "early_exit", 5) == ["v1", "v0"]
    linked = linked_trials(WINDOW, 2)
    assert linked == {REWARD_VS_HELDOUT: ["v6", "v5"], "hack_rate": ["v3", "v1"],
                      "hack_rate.early_exit": ["v1", "v0"], "hack_rate.tamper": ["v2"],
                      "hack_rate.unknown": ["v3"]}


def test_a_hack_class_above_its_band_raises_an_alert_with_its_trials_and_clears_when_gone():
    """Band high 0.15: early_exit (0.2) fires, tamper (0.1) does not; once early_exit leaves the
    window its alert clears; the reward alert names the top-reward trials."""
    cfg = MonitorConfig(min_samples=5, hack_class_band=Band(high=0.15), bands={}, reward_rise=0.2)
    book = AlertBook(cooldown_s=60)
    changes = check_alerts(book, cfg, 1000.0, rates=metrics.rates(WINDOW), verdicts=10,
                           reward_delta=0.5, rewards_counted=9, heldout_delta=0.0,
                           trials=linked_trials(WINDOW, 3))
    assert [(c.name, c.change, c.value, c.trials) for c in changes] == [
        ("hack_rate.early_exit", "raised", 0.2, ("v1", "v0")),
        (REWARD_VS_HELDOUT, "raised", 0.5, ("v6", "v5", "v4"))]
    clean = [_p(i, "pass", reward=1.0) for i in range(10)]
    changes = check_alerts(book, cfg, 1001.0, rates=metrics.rates(clean), verdicts=10,
                           reward_delta=0.0, rewards_counted=10, heldout_delta=0.0)
    assert {(c.name, c.change, c.trials) for c in changes} == {
        ("hack_rate.early_exit", "cleared", ()), (REWARD_VS_HELDOUT, "cleared", ())}
    assert not book.active


def test_status_and_prometheus_show_class_rates_and_alert_trials():
    """`whet status` lists each class and the trials of an active alert; /metrics has
    whet_hack_class_rate{kind=...}."""
    snap = build_snapshot(Window([], WINDOW), MonitorConfig(), 10.0, monitor="m", outcomes_total={},
                          beats=[], states=[], heldout=HeldoutSeries(), alerts=["hack_rate.early_exit"],
                          alert_trials=linked_trials(WINDOW, 2))
    assert snap.alert_trials == {"hack_rate.early_exit": ["v1", "v0"]}  # active alerts only
    text = generate_latest(prometheus.registry_for(lambda: snap)).decode()
    assert 'whet_hack_class_rate{kind="early_exit"} 0.2' in text
    assert 'whet_hack_class_rate{kind="tamper"} 0.1' in text and "whet_hack_rate 0.4" in text
    console = Console(record=True, width=200)
    render_metrics(snap, console, now=12.0)
    shown = console.export_text()
    assert "hack: early_exit" in shown and "20.0%" in shown
    assert "trials v1, v0" in shown
