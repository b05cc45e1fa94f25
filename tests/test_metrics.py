"""Run-health arithmetic, called directly: rates, reward summaries and drift, pass rates,
staleness, throughput, alert bands and cooldowns, trial rows and the Parquet schema."""

from __future__ import annotations

import msgspec
import pyarrow.parquet as pq
import pytest

from bus.messages import Heartbeat
from monitoring import metrics
from monitoring.alerts import (REWARD_VS_HELDOUT, AlertBook, HeldoutSeries, check_alerts,
                               outside, reward_outpaces_heldout)
from monitoring.config import Band, MonitorConfig
from monitoring.snapshot import throughput
from monitoring.trials import ParquetSink, trial_row
from tests.test_codec import samples

pytestmark = pytest.mark.unit

P = metrics.VerdictPoint


def test_rates_split_infrastructure_timeouts_and_clean_runs():
    """Dropped and infra.* are infrastructure, *.timeout is a timeout, the rest ran cleanly;
    pass rates leave dropped verdicts out and are kept per purpose."""
    points = [P(0, "train", "pass"), P(0, "train", "fail", "model.wrong_answer"),
              P(0, "train", "fail", "model.timeout"), P(0, "train", "dropped", "infra.sandbox"),
              P(0, "train", "fail", "infra.cpu_starvation"), P(0, "train", "hack", "hack.exit"),
              P(0, "eval", "pass"), P(0, "eval", "fail", "model.timeout")]
    r = metrics.rates(points)
    assert r["infra_failure_rate"] == pytest.approx(2 / 8)
    assert r["timeout_rate"] == pytest.approx(2 / 8)
    assert r["execution_success_rate"] == pytest.approx(4 / 8)
    assert r["hack_rate"] == pytest.approx(1 / 8)
    assert r["train_pass_rate"] == pytest.approx(1 / 5), "dropped left out, infra fail counted"
    assert r["eval_pass_rate"] == pytest.approx(1 / 2)
    assert metrics.rates([]) == {}


def test_reward_stats_and_drift_between_windows():
    """Summaries are exact on known values; drift gives the mean change and the KS distance."""
    stats = metrics.reward_stats([0.0, 1.0, 2.0, 3.0, 4.0])
    assert (stats.count, stats.mean, stats.p50, stats.min, stats.max) == (5, 2.0, 2.0, 0.0, 4.0)
    assert stats.std == pytest.approx(2 ** 0.5)
    assert metrics.reward_stats([]).count == 0
    assert metrics.ks_distance([0.0, 0.1], [0.0, 0.1]) == 0.0
    assert metrics.ks_distance([0.0, 0.1], [5.0, 6.0]) == 1.0
    assert metrics.ks_distance([0.0, 1.0], [1.0, 2.0]) == pytest.approx(0.5)
    drift = metrics.reward_drift([0.0, 0.0, 1.0], [1.0, 1.0, 1.0])
    assert drift["mean_delta"] == pytest.approx(2 / 3) and drift["ks"] == pytest.approx(2 / 3)
    assert metrics.reward_drift([], [1.0]) == {}


def test_training_rewards_leave_out_eval_and_dropped():
    points = [P(0, "train", "pass", reward=1.0), P(0, "eval", "pass", reward=1.0),
              P(0, "train", "dropped", "infra.sandbox", reward=None)]
    assert metrics.training_rewards(points) == [1.0]


def test_windows_split_at_their_boundaries():
    """A point exactly one window old belongs to the previous window."""
    points = [P(t, "train", "pass") for t in (70.0, 80.0, 90.0, 100.0, 40.0)]
    previous, current = metrics.split_windows(points, now=100.0, window_s=20.0)
    assert [p.at for p in previous] == [70.0, 80.0]
    assert [p.at for p in current] == [90.0, 100.0]


def test_pass_rates_by_domain_and_difficulty_bucket():
    points = [P(0, "train", "pass", domain="python", difficulty=0.2),
              P(0, "train", "fail", domain="python", difficulty=0.9),
              P(0, "train", "pass", domain="python", difficulty=1.5),
              P(0, "train", "dropped", domain="python", difficulty=1.0),
              P(0, "eval", "pass", domain="data", difficulty=3.0)]
    rows = metrics.pass_rates(points, step=1.0)
    assert [(r.purpose, r.domain, r.difficulty, r.passed, r.judged) for r in rows] == [
        ("eval", "data", "3", 1, 1), ("train", "python", "0", 1, 2),
        ("train", "python", "1", 1, 1)]
    assert rows[1].rate == 0.5
    assert metrics.difficulty_bucket(1.7, 0.5) == "1.5"


def test_staleness_histogram_caps_its_last_bucket():
    points = [P(0, "train", "pass", lag=lag) for lag in (0, 0, 1, 3, 9, None)]
    assert metrics.staleness_histogram(points, cap=3) == {"0": 2, "1": 1, "3+": 2}


def test_point_of_measures_lag_from_the_attempt_version():
    verdict = next(s for s in samples() if type(s).__name__ == "Verdict")  # attempt at v3
    assert metrics.point_of(verdict, current_version=5, now=7.0).lag == 2
    assert metrics.point_of(verdict, current_version=-1, now=7.0).lag is None
    assert metrics.point_of(verdict, current_version=5, now=7.0).at == 7.0  # judged_at unset


def test_throughput_combines_live_instances_only():
    """Generator tokens/s and executor jobs/s add up, learner step time averages; dead and
    stopped instances do not count."""
    def beat(kind, i, stats, state="ready", age=0.0):
        return Heartbeat(kind=kind, instance=f"{kind}-{i}", pid=1, host="h", state=state,
                         started_at=0.0, beat_at=100.0 - age, interval_s=2.0, stats=stats)

    beats = [beat("generator", 1, {"tokens_per_s": 100.0}), beat("generator", 2, {"tokens_per_s": 50.0}),
             beat("generator", 3, {"tokens_per_s": 999.0}, age=10.0),
             beat("learner", 1, {"step_time_s": 2.0}), beat("learner", 2, {"step_time_s": 4.0}),
             beat("executor", 1, {"jobs_per_s": 3.0}), beat("executor", 2, {"jobs_per_s": 9.0}, "stopped")]
    assert throughput(beats, now=100.0) == {"generator_tokens_per_s": 150.0,
                                            "learner_step_time_s": 3.0, "executor_jobs_per_s": 3.0}


def test_alert_raised_once_then_after_cooldown_and_cleared_once():
    book = AlertBook(cooldown_s=60.0)
    assert book.update("timeout_rate", True, 0.0) == "raised"
    assert book.update("timeout_rate", True, 1.0) is None
    assert book.update("timeout_rate", True, 59.0) is None
    assert book.update("timeout_rate", True, 61.0) == "raised"
    assert book.update("timeout_rate", False, 62.0) == "cleared"
    assert book.update("timeout_rate", False, 63.0) is None
    assert book.update("timeout_rate", True, 64.0) is None, "flapping stays quiet in the cooldown"
    assert "timeout_rate" in book.active


def test_bands_and_reward_versus_heldout():
    assert outside(0.5, Band(high=0.3)) and outside(0.1, Band(low=0.2))
    assert not outside(0.3, Band(low=0.1, high=0.3))
    assert reward_outpaces_heldout(0.2, 0.0, rise=0.1, flat=0.01)
    assert reward_outpaces_heldout(0.2, -0.1, rise=0.1, flat=0.01), "held-out falling is worse"
    assert not reward_outpaces_heldout(0.2, 0.05, rise=0.1, flat=0.01)
    assert not reward_outpaces_heldout(0.05, 0.0, rise=0.1, flat=0.01)
    assert not reward_outpaces_heldout(0.2, None, rise=0.1, flat=0.01)


def test_check_alerts_needs_enough_samples():
    """A band is only checked with `min_samples` verdicts in the window."""
    cfg = MonitorConfig(min_samples=10, bands={"timeout_rate": Band(high=0.3)})
    book = AlertBook(cfg.cooldown_s)
    quiet = check_alerts(book, cfg, 0.0, rates={"timeout_rate": 0.9}, verdicts=9,
                         reward_delta=None, rewards_counted=0, heldout_delta=None)
    assert quiet == []
    (alert,) = check_alerts(book, cfg, 1.0, rates={"timeout_rate": 0.9}, verdicts=10,
                            reward_delta=0.5, rewards_counted=9, heldout_delta=0.0)
    assert (alert.name, alert.change, alert.value, alert.detail["high"]) == (
        "timeout_rate", "raised", 0.9, 0.3)
    (reward,) = check_alerts(book, cfg, 2.0, rates={"timeout_rate": 0.9}, verdicts=10,
                             reward_delta=0.5, rewards_counted=10, heldout_delta=0.0)
    assert reward.name == REWARD_VS_HELDOUT and reward.change == "raised"


def test_hack_rate_has_a_default_band():
    """With the default bands, 2 hacks in 20 verdicts (10%) raise `hack_rate` and, all being
    early exits, `hack_rate.early_exit` too; 1 (5%) raises neither."""
    hacks = [P(0, "train", "hack", "hack.early_exit", reward=-1.0)] * 2
    honest = [P(0, "train", "fail", "model.wrong_answer", reward=0.0)] * 18
    cfg = MonitorConfig()
    assert cfg.bands["hack_rate"].high == 0.05
    for points, raised in ((hacks[:1] + honest + honest[:1], []),
                           (hacks + honest, ["hack_rate", "hack_rate.early_exit"])):
        rates = metrics.rates(points)
        changes = check_alerts(AlertBook(cfg.cooldown_s), cfg, 0.0, rates=rates,
                               verdicts=len(points), reward_delta=None, rewards_counted=0,
                               heldout_delta=None)
        assert [c.name for c in changes if c.change == "raised"] == raised


def test_heldout_delta_compares_with_the_rate_one_window_back():
    series = HeldoutSeries()
    assert series.delta(100.0, 30.0) is None
    series.add(50.0, 1, 0.40)
    series.add(65.0, 2, 0.42)
    series.add(95.0, 3, 0.45)
    assert series.delta(100.0, 30.0) == pytest.approx(0.45 - 0.42)
    assert series.latest() == (3, 0.45)


def test_trial_rows_round_trip_through_parquet(tmp_path):
    """A trial becomes one row with nested turns and execution; Parquet keeps every field."""
    trial = next(s for s in samples() if type(s).__name__ == "Trial")
    row = trial_row(trial, tokens=True)
    assert row["executors"] == ["executor-2"] and row["generators"] == ["generator-1"]
    assert row["turns"][0]["execution"]["status"] == "ok"
    assert row["turns"][0]["completion_ids"] == [4, 5]
    assert "completion_ids" not in trial_row(trial)["turns"][0]
    sink = ParquetSink(tmp_path / "t.parquet", tokens=True, batch=1)
    sink.write(row)
    sink.write(trial_row(msgspec.structs.replace(trial, trial_id="b"), tokens=True))
    sink.close()
    table = pq.read_table(tmp_path / "t.parquet").to_pylist()
    assert [r["trial_id"] for r in table] == ["a.0", "b"]
    assert table[0]["turns"][0]["execution"]["status"] == "ok"
    assert table[0]["turns"][0]["executor"] == "executor-2"
    assert table[0]["judge"] == "judge-1" and table[0]["current_version"] == 5
