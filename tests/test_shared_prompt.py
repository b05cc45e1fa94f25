"""A group's prompt read once per training forward: micro-batches by prompt, the shared
prefix, and a trainer step that matches reading every row whole."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from policy.batch import TrainSample
from policy.shared_prompt import by_prompt, first_sampled, shared_prefix
from tests.test_learner import tiny_run_config


def sample(name: str, prompt: list[int], completion: list[int], advantage: float = 1.0,
           behav: float = -10.8) -> TrainSample:
    ids = np.array(prompt + completion, np.int64)
    sampled = np.r_[np.zeros(len(prompt), bool), np.ones(len(completion), bool)]
    return TrainSample(name, "g", 0, advantage, ids, sampled,
                       np.where(sampled, np.float32(behav), np.float32(0)))


@pytest.mark.unit
def test_micro_batches_hold_one_prompt_each_longest_first_and_at_most_the_size():
    a, b = [5, 6, 7, 8], [5, 6, 9]
    samples = [sample("a1", a, [1]), sample("b1", b, [1, 2, 3]), sample("a2", a, [1, 2]),
               sample("a3", a, [1, 2, 3]), sample("b2", b, [4])]
    micros = by_prompt(samples, 2)
    assert [[s.verdict_id for s in m] for m in micros] == [["a3", "a2"], ["a1"], ["b1", "b2"]]


@pytest.mark.unit
def test_the_shared_prefix_stops_before_the_first_scored_token_and_where_rows_differ():
    same = [sample("x", [5, 6, 7, 8], [1, 2]), sample("y", [5, 6, 7, 8], [3])]
    assert shared_prefix(same) == 3  # the logit scoring token 4 comes from the rows' own pass
    differ = [sample("x", [5, 6, 7, 8], [1]), sample("y", [5, 6, 9, 8], [1])]
    assert shared_prefix(differ) == 2
    assert shared_prefix(same[:1]) == 0
    assert shared_prefix([sample("x", [5], [1]), sample("y", [5], [2])]) == 0
    assert first_sampled(TrainSample("z", "g", 0, 0.0, np.arange(3), np.zeros(3, bool),
                                     np.zeros(3, np.float32))) == 3


@pytest.mark.bus
async def test_a_step_reading_the_prompt_once_matches_reading_every_row_whole(tmp_path):
    """Two groups of four with long prompts, at the same initial weights and a learning rate
    too small to move them: the shared-prompt step gives the whole-row step's loss and
    gradient norm (float32), and says how many prompt positions it did not run again."""
    from policy.ranks import RankGroup

    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 49152, 40).tolist() for _ in range(2)]
    samples = [sample(f"v{g}{i}", prompts[g], rng.integers(3, 49152, 6 + 3 * i).tolist(),
                      advantage=float(i % 2) * 2 - 1)
               for g in range(2) for i in range(4)]
    cfg = tiny_run_config(tmp_path)
    results = {}
    for shared in (False, True):
        lc = msgspec.structs.replace(cfg.learner, shared_prompt=shared, lr=1e-12,
                                     precision="fp32", micro_batch_size=4)
        ranks = RankGroup(msgspec.structs.replace(cfg, learner=lc).trainer,
                          tmp_path / f"ckpt-{shared}")
        await ranks.start()
        try:
            results[shared] = await ranks.call("train", samples)
        finally:
            await ranks.close()
    whole, once = results[False], results[True]
    assert whole["prefix_reads_saved"] == 0
    assert once["prefix_reads_saved"] == 2 * 39 * 3  # each group: 39 positions, 3 rows spared
    assert once["tokens"] == whole["tokens"] == sum(s.tokens for s in samples)
    assert once["loss"] == pytest.approx(whole["loss"], rel=1e-4)
    assert once["grad_norm"] > 0
    assert once["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-4)
