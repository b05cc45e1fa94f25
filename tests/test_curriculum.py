"""The sampler's decisions as pure functions: band, ladder, mix, replay, staleness admission."""

from __future__ import annotations

import collections
import random

import msgspec
import pytest

from envs.admission import (SignalRefunds, admissible_attempts, admissible_groups, has_signal,
                            refund_credit, staleness_capacity)
from envs.config import SamplerConfig
from envs.curriculum import Curriculum
from envs.evaluation import EvalPoint, reward_without_heldout_gain

pytestmark = pytest.mark.unit

CFG = SamplerConfig(replay_share=0.0)


def _pool(cfg: SamplerConfig = CFG, mix=None, rungs=(0,), per=50, domains=("python",)):
    c = Curriculum(cfg, mix or {d: 1.0 for d in domains})
    for d in domains:
        for r in rungs:
            for i in range(per):
                c.add(f"{d}/{r}/{i}", d, r)
    return c


def _measure(c: Curriculum, task_id: str, passes: int, of: int = 4) -> None:
    for k in range(of):
        c.record(task_id, k < passes, group_id=f"g-{task_id}")


def _counts(c: Curriculum, n: int = 6000, seed: int = 0) -> collections.Counter:
    rng = random.Random(seed)
    return collections.Counter(c.choose(rng) for _ in range(n))


def test_band_favours_just_out_of_reach_tasks():
    """In-band tasks are sampled ~1/out_of_band_weight times as often as solved or unsolved."""
    c = _pool(per=30)
    for i in range(10):
        _measure(c, f"python/0/{i}", 4)        # always solved
    for i in range(10, 20):
        _measure(c, f"python/0/{i}", 0)        # never solved
    for i in range(20, 30):
        _measure(c, f"python/0/{i}", 2)        # in the band
    counts = _counts(c)
    solved = sum(counts[f"python/0/{i}"] for i in range(10))
    unsolved = sum(counts[f"python/0/{i}"] for i in range(10, 20))
    in_band = sum(counts[f"python/0/{i}"] for i in range(20, 30))
    assert solved > 0 and unsolved > 0  # rarely, not never
    assert 12 < in_band / solved < 30 and 12 < in_band / unsolved < 30  # 1/0.05 = 20


def test_out_of_band_weight_one_samples_a_rung_uniformly():
    """out_of_band_weight = 1: solved, unsolved, in-band and unmeasured tasks are chosen
    equally often (the band is off), and the bands are still recorded for replay."""
    c = _pool(msgspec.structs.replace(CFG, out_of_band_weight=1.0), per=40)
    for i, passes in zip(range(30), [4] * 10 + [0] * 10 + [2] * 10):
        _measure(c, f"python/0/{i}", passes)
    counts = _counts(c, n=8000)
    shares = [sum(counts[f"python/0/{i}"] for i in range(k, k + 10)) / 8000
              for k in (0, 10, 20, 30)]
    assert all(0.22 < share < 0.28 for share in shares), shares
    assert c.band[0] == "solved" and c.band[10] == "unsolved"


def test_band_bounds_come_from_config():
    """A pass rate of 0.25 is inside [0.2, 0.8] but outside [0.3, 0.7]."""
    for low, high, expected in ((0.2, 0.8, "in_band"), (0.3, 0.7, "unsolved")):
        c = _pool(msgspec.structs.replace(CFG, band_low=low, band_high=high), per=1)
        _measure(c, "python/0/0", 1, of=4)
        assert c.band[0] == expected


def test_pass_rates_follow_the_policy():
    """Old attempts fade: a task once never solved becomes solved after a few good groups."""
    c = _pool(per=1)
    _measure(c, "python/0/0", 0)
    for g in range(6):
        for _ in range(4):
            c.record("python/0/0", True, group_id=f"g{g}")
    assert c.pass_rate("python/0/0") > 0.8 and c.band[0] == "solved"
    assert c.graded_difficulty("python/0/0") < 0.2


def test_domain_mix_follows_config_and_zero_means_never():
    """Domains are drawn by their mix ratio; a domain without one is not practised."""
    c = _pool(mix={"python": 0.6, "data": 0.4}, domains=("python", "data", "structured"), per=20)
    counts = collections.Counter(c.domain[c.index[t]] for t in _counts(c).elements())
    assert counts["structured"] == 0
    assert abs(counts["python"] / sum(counts.values()) - 0.6) < 0.04


def test_mix_draw_keeps_every_run_of_draws_within_one_of_its_share():
    """MixDraw: after n draws each domain has its share of n within one, at every n; a domain
    that has no tasks for a while is skipped without building up a debt."""
    from envs.curriculum import MixDraw

    draw, counts = MixDraw({"a": 0.5, "b": 0.3, "c": 0.2, "never": 0.0}), collections.Counter()
    for n in range(1, 201):
        counts[draw.next()] += 1
        assert all(abs(counts[d] - share * n) < 1.0 for d, share in draw.mix.items()), (n, counts)
    assert counts["never"] == 0
    half = MixDraw({"a": 0.5, "b": 0.5})
    assert [half.next(["a"]) for _ in range(5)] == ["a"] * 5
    assert [half.next() for _ in range(4)] in (["a", "b", "a", "b"], ["b", "a", "b", "a"])
    with pytest.raises(ValueError, match="no domain"):
        half.next(["zzz"])


def test_ladder_is_centred_on_the_frontier_and_moves_up_as_the_policy_improves():
    """Rungs follow the ladder weights around the frontier; passing the frontier promotes it."""
    cfg = msgspec.structs.replace(CFG, min_rung_attempts=8)
    c = _pool(cfg, rungs=(0, 1, 2, 3, 4), per=40)
    rungs = collections.Counter(c.rung[c.index[t]] for t in _counts(c).elements())
    # frontier 0: offsets -2,-1 do not exist, so weights 0.5 (rung 0) and 0.2 (rung 1)
    assert abs(rungs[0] / 6000 - 0.5 / 0.7) < 0.04 and rungs[2] == 0
    for i in range(3):
        _measure(c, f"python/0/{i}", 3)  # 9 of 12 at the frontier: promote (>= 0.6)
    assert c.frontiers["python"].rung == 1
    for i in range(3):
        _measure(c, f"python/1/{i}", 4)
    assert c.frontiers["python"].rung == 2
    rungs = collections.Counter(c.rung[c.index[t]] for t in _counts(c).elements())
    assert rungs[2] > rungs[1] > rungs[0] > 0 and rungs[3] > 0 and rungs[4] == 0
    for i in range(3):
        _measure(c, f"python/2/{i}", 0)  # failing at the frontier: demote (< 0.1)
    assert c.frontiers["python"].rung == 1


def test_replay_share_goes_to_easy_tasks():
    """With replay_share 0.3 and the frontier at rung 2, ~0.3 of choices come from below
    plus what the ladder itself puts there."""
    cfg = msgspec.structs.replace(CFG, replay_share=0.3, ladder_offsets=[0],
                                  ladder_weights=[1.0])
    c = _pool(cfg, rungs=(0, 1, 2), per=20)
    c.frontiers["python"].rung = 2
    rungs = collections.Counter(c.rung[c.index[t]] for t in _counts(c).elements())
    assert abs((rungs[0] + rungs[1]) / 6000 - 0.3) < 0.03


def test_heldout_tasks_are_refused():
    """The curriculum cannot hold a held-out task, so it can never choose one."""
    c = _pool(per=1)
    with pytest.raises(ValueError, match="never sampled for training"):
        c.add("python/x", "python", 0, split="heldout")
    assert "python/x" not in c.index


def test_snapshot_restores_rates_and_frontiers():
    """A restarted sampler gets its pass rates and frontiers back."""
    cfg = msgspec.structs.replace(CFG, min_rung_attempts=4)
    c = _pool(cfg, rungs=(0, 1), per=5)
    _measure(c, "python/0/0", 4)
    again = _pool(cfg, rungs=(0, 1), per=5)
    again.restore(c.snapshot())
    assert again.pass_rate("python/0/0") == 1.0 and again.frontiers["python"].rung == 1


@pytest.mark.parametrize("version,staleness,batch,in_flight,produced,allowed", [
    (0, 2, 32, 0, 0, 96),          # (0 + 2 + 1) * 32
    (0, 2, 32, 90, 0, 6),
    (0, 2, 32, 64, 32, 0),          # full until version 1 arrives
    (1, 2, 32, 64, 32, 32),
    (0, 0, 8, 8, 0, 0),             # sync: one batch per version
    (3, 0, 8, 0, 24, 8),
    (5, 1, 4, 100, 0, 0),           # over budget: never negative
])
def test_staleness_admission(version, staleness, batch, in_flight, produced, allowed):
    """in_flight + produced <= (version + staleness + 1) * batch_size."""
    assert staleness_capacity(version, staleness, batch) == (version + staleness + 1) * batch
    assert admissible_attempts(in_flight=in_flight, produced=produced, version=version,
                               max_staleness=staleness, batch_size=batch) == allowed


def test_admission_counts_whole_groups():
    """Groups are admitted whole: 6 attempts of room with groups of 4 admit one group."""
    assert admissible_groups(in_flight=90, produced=0, version=0, max_staleness=2, batch_size=32,
                             group_size=4) == 1


def test_refill_refunds_a_finished_group_without_signal_once():
    """Groups of 3: all equal refunds its rewarded members when the third verdict arrives
    (a dropped one is not refunded, a repeated one is counted once); a mixed group none."""
    refunds = SignalRefunds()
    assert refunds.record("same", 3, "same.0", 1.0) == 0
    assert refunds.record("same", 3, "same.0", 1.0) == 0
    assert refunds.record("same", 3, "same.1", None) == 0
    assert refunds.record("same", 3, "same.2", 1.0) == 2
    assert [refunds.record("mixed", 3, f"mixed.{i}", r) for i, r in enumerate([1.0, 0.0, 1.0])] \
        == [0, 0, 0]
    assert refunds.open == {}


def test_refunds_free_no_more_budget_than_refill_batches_can_take():
    """Batch 8, at most 32 a batch, staleness 1: refunds free up to (0 + 1 + 1) * 24 = 48
    attempts at step 0 and 72 at step 1; fewer refunds free themselves."""
    assert refund_credit(100, version=0, max_staleness=1, batch_size=8, most=32) == 48
    assert refund_credit(100, version=1, max_staleness=1, batch_size=8, most=32) == 72
    assert refund_credit(20, version=0, max_staleness=1, batch_size=8, most=32) == 20


def test_has_signal_agrees_with_the_learners_advantages():
    """The sampler's test (no torch) says what policy.objective.group_advantages does."""
    from policy.objective import group_advantages

    for rewards in ([1.0, 1.0], [1.0, 0.0], [0.3, None, 0.3], [None, 1.0], [], [0.5, 0.5 + 1e-9],
                    [-1.0, 0.1, 0.1], [None, None]):
        assert has_signal(rewards) == any(group_advantages(rewards)), rewards


def test_divergence_warning_needs_reward_up_and_heldout_flat():
    """Training reward up 0.2 with held-out flat warns; with held-out up it does not."""
    flat = [EvalPoint(version=v, overall=0.3, train_reward=0.1 * v) for v in range(3)]
    assert "rose" in reward_without_heldout_gain(flat, window=3, reward_rise=0.05, tolerance=0.0)
    rising = [EvalPoint(version=v, overall=0.3 + 0.1 * v, train_reward=0.1 * v) for v in range(3)]
    assert reward_without_heldout_gain(rising, window=3, reward_rise=0.05, tolerance=0.0) == ""
    assert reward_without_heldout_gain(flat[:2], window=3, reward_rise=0.05, tolerance=0.0) == ""


def test_rung_difficulty_is_graded_by_measured_pass_rate():
    """A rung the policy solves reports a high pass rate, one it fails a low one."""
    c = _pool(rungs=(0, 3), per=5)
    for g in range(10):
        c.record(f"python/0/{g % 5}", True, group_id=f"a{g}")
        c.record(f"python/3/{g % 5}", False, group_id=f"b{g}")
    gauges = c.gauges()
    assert gauges["python.L0.pass_rate"] > 0.9 and gauges["python.L3.pass_rate"] < 0.1


def test_without_replacement_draws_every_task_of_a_rung_once_per_pass():
    """without_replacement: 3 passes over a 10-task rung draw each task exactly 3 times, in
    band order within a pass (in-band before solved), while a task measured meanwhile keeps
    its new band; without it the same draws repeat in-band tasks."""
    cfg = msgspec.structs.replace(CFG, without_replacement=True)
    c = _pool(cfg, per=10)
    for i in range(5):
        _measure(c, f"python/0/{i}", 4)        # solved: weight 0.05
    for i in range(5, 10):
        _measure(c, f"python/0/{i}", 2)        # in the band
    rng = random.Random(0)
    passes = [[c.choose(rng) for _ in range(10)] for _ in range(3)]
    for drawn in passes:
        assert sorted(drawn) == sorted(f"python/0/{i}" for i in range(10))
    assert sum(f"python/0/{i}" in passes[0][:5] for i in range(5, 10)) >= 4
    assert c.gauges()["python.solved"] + c.gauges()["python.in_band"] == 10
    for k in range(12):                        # resting or not: now unsolved
        c.record("python/0/7", False, group_id=f"later-{k}")
    drawn = [c.choose(rng) for _ in range(10)]
    assert sorted(drawn) == sorted(f"python/0/{i}" for i in range(10))
    assert c.band[c.index["python/0/7"]] == "unsolved"
    plain = _pool(per=10)
    for i in range(5):
        _measure(plain, f"python/0/{i}", 4)
    for i in range(5, 10):
        _measure(plain, f"python/0/{i}", 2)
    assert max(_counts(plain, n=30).values()) > 3


def test_without_replacement_keeps_the_ladder_and_replay():
    """Resting tasks still count for the ladder (a rung whose tasks all rest is not empty)
    and replay never fails on a rung whose tasks all rest."""
    cfg = msgspec.structs.replace(SamplerConfig(replay_share=0.5), without_replacement=True,
                                  ladder_offsets=[-1, 0], ladder_weights=[0.5, 0.5])
    c = _pool(cfg, rungs=(0, 1), per=3)
    c.frontiers["python"].rung = 1
    rng = random.Random(1)
    drawn = collections.Counter(c.choose(rng) for _ in range(60))
    assert set(drawn) == {f"python/{r}/{i}" for r in (0, 1) for i in range(3)}
    assert c._has("python", 0) and c._has("python", 1)


def test_a_pass_over_the_ladder_draws_every_reached_task_once():
    """pass_over = "ladder": with the frontier on rung 0 the ladder reaches rungs 0 and 1 at
    weights 0.5 and 0.2, yet each pass of 10 draws holds each of their 10 tasks once; a rung
    outside the ladder's reach (3) is never drawn. Per rung, the same draws repeat rung 0's
    tasks within a pass (its pass ends sooner) and leave some rung-1 task out."""
    cfg = msgspec.structs.replace(CFG, without_replacement=True, pass_over="ladder")
    c = _pool(cfg, rungs=(0, 1, 3), per=5)
    rng = random.Random(0)
    reached = sorted(f"python/{r}/{i}" for r in (0, 1) for i in range(5))
    for _ in range(4):
        assert sorted(c.choose(rng) for _ in range(10)) == reached
    per_rung = _pool(msgspec.structs.replace(cfg, pass_over="rung"), rungs=(0, 1, 3), per=5)
    rng = random.Random(0)
    passes = [collections.Counter(per_rung.choose(rng) for _ in range(10)) for _ in range(4)]
    assert any(max(p.values()) > 1 for p in passes)
    assert any(len(p) < 10 for p in passes)
