"""Held-out statistics against values worked out by hand: Wilson intervals, the exact sign
(McNemar) test, unbiased pass@1 over k samples, paired comparisons on shared tasks, and a
round's typed result built from its verdicts."""

from __future__ import annotations

import pytest

from bus.messages import TaskOutcome
from envs.evaluation import Round
from envs.stats import estimate, paired_change, sign_test, wilson_interval

pytestmark = pytest.mark.unit


def test_wilson_interval_of_3_in_10():
    """p = 0.3, n = 10, z = 1.96: centre (0.3 + 0.19208) / 1.38415 = 0.35551, half-width
    1.41600 * sqrt(0.021 + 0.0096036) = 0.24771, so [0.1078, 0.6032]."""
    low, high = wilson_interval(0.3, 10)
    assert (low, high) == (pytest.approx(0.1078, abs=1e-4), pytest.approx(0.6032, abs=1e-4))


def test_wilson_interval_at_the_edges_stays_inside_0_1_and_is_not_empty():
    """0 of 10 gives [0, 0.2775] and 10 of 10 [0.7225, 1]: never a zero-width interval.
    Nothing judged gives [0, 1]."""
    assert wilson_interval(0.0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson_interval(1.0, 10) == (pytest.approx(0.7225, abs=1e-4), 1.0)
    assert wilson_interval(0.5, 0) == (0.0, 1.0)


def test_sign_test_is_the_exact_two_sided_mcnemar_p_value():
    """b=1, c=6: 2 * (1 + 7) / 128 = 0.125. b=0, c=5: 2/32. b=8, c=2: 2 * (1 + 10 + 45) / 1024.
    Balanced 3/3 caps at 1; no discordant pair is 1."""
    assert sign_test(1, 6) == 0.125
    assert sign_test(0, 5) == 0.0625
    assert sign_test(8, 2) == pytest.approx(0.109375)
    assert sign_test(3, 3) == 1.0
    assert sign_test(0, 0) == 1.0


def test_sign_test_stays_exact_for_many_pairs():
    """b=0, c=60: 2 / 2^60, far below any float underflow worry."""
    assert sign_test(0, 60) == pytest.approx(2 / 2 ** 60)


def test_pass_at_1_over_k_samples_is_the_mean_of_per_task_rates():
    """k=4: rates 4/4, 1/4, 0/4 and 2/3 (one attempt dropped) average to 0.47917; a task with
    nothing judged is left out. The interval is Wilson's with the 4 tasks as the unit."""
    e = estimate({"a": (4, 4), "b": (1, 4), "c": (0, 4), "d": (2, 3), "e": (0, 0)})
    assert e.rate == pytest.approx((1 + 0.25 + 0 + 2 / 3) / 4)
    assert (e.tasks, e.attempts) == (4, 15)
    assert (e.low, e.high) == wilson_interval(e.rate, 4)


def test_pass_rate_with_one_sample_per_task_is_the_plain_rate_and_wilson():
    """k=1: 3 of 10 pass: rate 0.3 and the textbook interval [0.1078, 0.6032]."""
    e = estimate({f"t{i}": (int(i < 3), 1) for i in range(10)})
    assert e.rate == pytest.approx(0.3)
    assert (e.low, e.high) == (pytest.approx(0.1078, abs=1e-4), pytest.approx(0.6032, abs=1e-4))


def test_paired_change_counts_gains_and_losses_on_shared_tasks_only():
    """Shared tasks a-d: b and c gained, d lost, a unchanged; e (baseline only) and f (now
    only) are left out. p = sign test(2, 1) = 2 * 4 / 8 = 1; mean change (0+1+1-1)/4."""
    base = {"a": (1, 1), "b": (0, 1), "c": (0, 1), "d": (1, 1), "e": (0, 1)}
    now = {"a": (1, 1), "b": (1, 1), "c": (1, 1), "d": (0, 1), "f": (1, 1)}
    p = paired_change(base, now)
    assert (p.tasks, p.gained, p.lost, p.p_value) == (4, 2, 1, 1.0)
    assert p.delta == pytest.approx(0.25)


def test_paired_change_with_k_samples_compares_per_task_rates():
    """k=4: 1/4 -> 3/4 gained, 2/4 -> 2/4 tied, 4/4 -> 3/4 lost, 0/4 -> 2/3 gained (a drop):
    gained 2, lost 1, mean change (0.5 + 0 - 0.25 + 0.6667) / 4."""
    base = {"a": (1, 4), "b": (2, 4), "c": (4, 4), "d": (0, 4)}
    now = {"a": (3, 4), "b": (2, 4), "c": (3, 4), "d": (2, 3)}
    p = paired_change(base, now)
    assert (p.tasks, p.gained, p.lost) == (4, 2, 1)
    assert p.delta == pytest.approx((0.5 + 0 - 0.25 + 2 / 3) / 4)


def test_a_clear_improvement_is_significant_and_no_change_is_not():
    """40 tasks, 12 gained and 1 lost: 2 * (1 + 13) / 2^13 = 0.00342; unchanged rounds give 1."""
    base = {f"t{i}": (int(i >= 30), 1) for i in range(40)}
    now = {f"t{i}": (int(i >= 18 and i != 39), 1) for i in range(40)}
    p = paired_change(base, now)
    assert (p.gained, p.lost) == (12, 1)
    assert p.p_value == pytest.approx(2 * 14 / 2 ** 13)
    assert paired_change(base, base).p_value == 1.0


def _round_with(outcomes: dict[str, list[str]], version: int = 3) -> Round:
    """A round of `version` whose task `<domain>/<n>` got the listed outcomes."""
    rnd = Round(version, sum(len(v) for v in outcomes.values()), 0.0)
    for task_id, results in outcomes.items():
        for i, outcome in enumerate(results):
            reward = None if outcome == "dropped" else float(outcome == "pass")
            rnd.add(f"{task_id}.{i}", version, task_id, task_id.split("/")[0], outcome, reward)
    return rnd


def test_a_round_result_with_k_samples_pairs_with_the_baseline_by_task():
    """k=2. py/1 2/2 (was 0/1: gained), py/2 1/2 (was 1/1: lost), json/1 0/1 after a drop
    (was 0/1: tied), json/2 new (not paired). Trained 'py': pass@1 (1 + 0.5) / 2 = 0.75."""
    rnd = _round_with({"py/1": ["pass", "pass"], "py/2": ["pass", "fail"],
                          "json/1": ["fail", "dropped"], "json/2": ["pass", "pass"]})
    baseline = {"py/1": TaskOutcome("py", 0, 1), "py/2": TaskOutcome("py", 1, 1),
                "json/1": TaskOutcome("json", 0, 1)}
    r = rnd.result(3, trained={"py"}, baseline=baseline, baseline_version=0,
                   samples_per_task=2, train_reward=0.5, now=7.0)
    assert (r.round, r.version, r.baseline_version, r.samples_per_task) == (3, 3, 0, 2)
    assert r.overall.rate == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert (r.overall.tasks, r.overall.attempts, r.dropped, r.complete) == (4, 7, 1, True)
    assert (r.overall.paired, r.overall.gained, r.overall.lost) == (3, 1, 1)
    assert r.trained.rate == 0.75 and (r.trained.gained, r.trained.lost) == (1, 1)
    assert r.transfer.rate == 0.5 and (r.transfer.paired, r.transfer.gained) == (1, 0)
    assert (r.trained.low, r.trained.high) == wilson_interval(0.75, 2)
    assert r.tasks["json/1"] == TaskOutcome("json", 0, 1)
    assert r.rewards == {"json": pytest.approx(2 / 3), "py": 0.75}


def test_a_round_counts_each_attempt_once_and_keeps_versions_apart():
    """A redelivered verdict is not counted again; attempts of another version get their own
    result, with no transfer score when every domain is trained."""
    rnd = Round(4, 3, 0.0)
    assert rnd.add("a.0", 4, "py/1", "py", "pass", 1.0)
    assert not rnd.add("a.0", 4, "py/1", "py", "pass", 1.0)
    assert rnd.add("b.0", 5, "py/1", "py", "fail", 0.0)
    assert not rnd.complete
    r4, r5 = (rnd.result(v, trained={"py"}, baseline={}, baseline_version=-1,
                         samples_per_task=1, train_reward=None, now=0.0) for v in (4, 5))
    assert (r4.overall.rate, r5.overall.rate) == (1.0, 0.0)
    assert r4.transfer is None and r4.overall.paired == 0 and r4.overall.p_value == 1.0


def test_a_round_result_has_each_domains_rungs_with_intervals_and_pairs():
    """py rung 0: 2 tasks, 1 passes (0.5, Wilson over 2, gained 1 since a baseline written
    before outcomes carried rungs); py rung 1: 3 tasks, 0 pass (lost 1 of 2 paired); json
    rung 0: 1 task passing, unpaired. Each task's outcome keeps its rung."""
    rnd = Round(6, 6, 0.0)
    for i, (task, domain, rung, outcome) in enumerate([
            ("py/a", "py", 0, "pass"), ("py/b", "py", 0, "fail"), ("py/c", "py", 1, "fail"),
            ("py/d", "py", 1, "fail"), ("py/e", "py", 1, "fail"), ("json/a", "json", 0, "pass")]):
        rnd.add(f"x.{i}", 6, task, domain, outcome, float(outcome == "pass"), rung=rung)
    baseline = {"py/a": TaskOutcome("py", 0, 1), "py/b": TaskOutcome("py", 0, 1),
                "py/c": TaskOutcome("py", 1, 1), "py/d": TaskOutcome("py", 0, 1)}
    r = rnd.result(6, trained={"py"}, baseline=baseline, baseline_version=0,
                   samples_per_task=1, train_reward=None, now=1.0)
    assert sorted((d, sorted(rs)) for d, rs in r.rungs.items()) == [("json", [0]), ("py", [0, 1])]
    py0, py1, json0 = r.rungs["py"][0], r.rungs["py"][1], r.rungs["json"][0]
    assert (py0.rate, py0.tasks, (py0.low, py0.high)) == (0.5, 2, wilson_interval(0.5, 2))
    assert (py0.paired, py0.gained, py0.lost) == (2, 1, 0)
    assert (py1.rate, py1.tasks, py1.paired, py1.gained, py1.lost) == (0.0, 3, 2, 0, 1)
    assert (json0.rate, json0.tasks, json0.paired) == (1.0, 1, 0)
    assert r.tasks["py/c"] == TaskOutcome("py", 0, 1, rung=1)
    assert r.domains["py"].tasks == py0.tasks + py1.tasks


def test_t95_reads_the_table_then_the_expansion_within_its_stated_error():
    """Student's t quantiles: the table to 10 degrees of freedom, then the expansion, each
    within 0.003 of published values; no degrees of freedom is an error."""
    from envs.stats import t95

    assert t95(2) == 4.303
    for df, exact in ((11, 2.201), (15, 2.131), (30, 2.042), (120, 1.980)):
        assert abs(t95(df) - exact) < 0.003, df
    with pytest.raises(ValueError, match="at least 1"):
        t95(0)


def test_mean_interval_is_as_wide_as_few_units_warrant():
    """Three seeds 1, 2, 3: mean 2, half-width 4.303 * 1 / sqrt(3); one unit has none."""
    from envs.stats import mean_interval

    mean, low, high = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert abs((high - mean) - 4.303 / 3 ** 0.5) < 1e-9 and abs((mean - low) - (high - mean)) < 1e-9
    assert mean_interval([0.5]) is None
