"""The RL objective's pure functions against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from bus.messages import LayerResult
from judging.config import RewardConfig
from judging.reward import compose
from policy.objective import (clipped_surrogate, group_advantages, importance_weights,
                              kl_to_reference, sample_scales, token_logprobs)

pytestmark = pytest.mark.unit


def test_group_advantages_are_centred_and_scaled_by_population_std():
    """Rewards 1,0,0,1: mean 0.5, std 0.5, so advantages are +-1."""
    assert group_advantages([1.0, 0.0, 0.0, 1.0], eps=0) == [1.0, -1.0, -1.0, 1.0]


def test_group_advantages_unscaled_subtract_the_mean():
    """Without scaling, 3,1,2 give 1,-1,0."""
    assert group_advantages([3.0, 1.0, 2.0], scale=False) == [1.0, -1.0, 0.0]


def test_dropped_members_are_missing_not_zero():
    """A dropped member (None) stays None and does not pull the mean: 1,None,0 -> +1,None,-1."""
    assert group_advantages([1.0, None, 0.0], eps=0) == [1.0, None, -1.0]


def test_uniform_or_lonely_groups_have_no_signal():
    """All-equal rewards, or a single present reward, give zero advantages."""
    assert group_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert group_advantages([None, 0.7, None]) == [None, 0.0, None]


def _layers(*ratios):
    names = ("visible", "hidden", "robustness")
    return [LayerResult(name="structure", passed=3, total=3, ok=True)] + [
        LayerResult(name=n, passed=p, total=t, ok=p == t) for n, (p, t) in zip(names, ratios)]


def test_a_hack_in_a_group_gets_a_lower_advantage_than_an_honest_syntax_error():
    """Hack (-1), syntax error (-0.5), pass (1), wrong answer (0.1): the hack's advantage is
    the group's lowest, below the syntax error's, scaled or not."""
    full = _layers((2, 2), (6, 6), (10, 10))
    weights = RewardConfig()
    hack, _ = compose(compiled=True, format_ok=True, layers=full, turns=1, hack=True, weights=weights)
    syntax, _ = compose(compiled=False, format_ok=False, layers=[], turns=1, hack=False, weights=weights)
    honest, _ = compose(compiled=True, format_ok=True, layers=full, turns=1, hack=False, weights=weights)
    wrong, _ = compose(compiled=True, format_ok=True, layers=_layers((0, 2), (0, 6), (0, 10)),
                       turns=1, hack=False, weights=weights)
    assert (hack, syntax, honest, wrong) == (-1.0, -0.5, 1.0, pytest.approx(0.1))
    for scale in (True, False):
        adv = group_advantages([hack, syntax, honest, wrong], scale=scale)
        assert adv[0] < adv[1] < 0 and adv[0] == min(adv)
    # By hand, unscaled: mean (-1 - 0.5 + 1 + 0.1) / 4 = -0.1.
    assert group_advantages([hack, syntax, honest, wrong], scale=False) == pytest.approx(
        [-0.9, -0.4, 1.1, 0.2])


def test_truncated_importance_weights_cap_at_the_clip():
    """prox/behav = e^0.5 (1.65) stays; e^1.5 (4.48) is cut to the cap 2."""
    prox = torch.tensor([0.0, 0.0, -1.0])
    behav = torch.tensor([-0.5, -1.5, -1.0])
    weight, keep = importance_weights(prox, behav, "truncated", cap=2.0)
    assert weight.tolist() == pytest.approx([math.exp(0.5), 2.0, 1.0])
    assert keep.tolist() == [1.0, 1.0, 1.0]


def test_decoupled_importance_weights_mask_above_the_clip():
    """Decoupled keeps e^0.5 and masks the token whose weight e^1.5 exceeds the cap."""
    prox = torch.tensor([0.0, 0.0])
    behav = torch.tensor([-0.5, -1.5])
    weight, keep = importance_weights(prox, behav, "decoupled", cap=2.0)
    assert weight.tolist() == pytest.approx([math.exp(0.5), 0.0])
    assert keep.tolist() == [1.0, 0.0]


def test_icepop_masks_ratios_outside_the_band_on_both_sides():
    """Band [0.5, 2]: e^-1 (0.37) and e^1 (2.72) are masked, e^-0.5 (0.61), 1 and e^0.5
    (1.65) keep their weight; the masked share is 2/5."""
    prox = torch.zeros(5)
    behav = torch.tensor([1.0, 0.5, 0.0, -0.5, -1.0])
    weight, keep = importance_weights(prox, behav, "icepop", cap=2.0, floor=0.5)
    assert weight.tolist() == pytest.approx([0.0, math.exp(-0.5), 1.0, math.exp(0.5), 0.0])
    assert keep.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]
    assert (1 - keep).mean().item() == pytest.approx(0.4)
    _, decoupled = importance_weights(prox, behav, "decoupled", cap=2.0, floor=0.5)
    assert decoupled.tolist() == [1.0, 1.0, 1.0, 1.0, 0.0], "decoupled ignores the floor"


def test_icepop_gives_masked_tokens_no_gradient_and_kept_ones_w_times_a():
    """On-proximal, A = 1: the kept token (w = e^-0.5) has gradient -e^-0.5, the masked ones
    (w = e^-1 below the floor, e^1 above the cap) exactly 0; `kept` marks which."""
    logp = torch.tensor([-1.0, -1.0, -1.0], requires_grad=True)
    behav = torch.tensor([0.0, -0.5, -2.0])
    loss, stats = clipped_surrogate(logp, logp.detach(), behav, torch.ones(3), "icepop", 0.2,
                                    cap=2.0, floor=0.5)
    loss.sum().backward()
    assert logp.grad.tolist() == pytest.approx([0.0, -math.exp(-0.5), 0.0])
    assert loss.tolist() == pytest.approx([0.0, -math.exp(-0.5), 0.0])
    assert stats["kept"].tolist() == [0.0, 1.0, 0.0]


def test_surrogate_clips_the_ratio_in_the_direction_of_the_advantage():
    """r = e^0.3 (1.35) > 1.2: with A=+1 the loss is -1.2 (clipped); with A=-1 it is +1.35."""
    logp = torch.tensor([0.3, 0.3])
    prox = torch.tensor([0.0, 0.0])
    adv = torch.tensor([1.0, -1.0])
    loss, stats = clipped_surrogate(logp, prox, prox, adv, "truncated", 0.2, cap=2.0)
    assert loss.tolist() == pytest.approx([-1.2, math.exp(0.3)])
    assert stats["clipped"].tolist() == [1.0, 0.0]


def test_surrogate_weights_by_truncated_importance_and_its_gradient_is_w_times_A():
    """On-proximal (r=1) the gradient wrt logp is -w*A: here w = min(e^1, 2) = 2, A = 0.5."""
    logp = torch.tensor([-1.0], requires_grad=True)
    behav = torch.tensor([-2.0])
    loss, _ = clipped_surrogate(logp, logp.detach(), behav, torch.tensor([0.5]), "truncated",
                                0.2, cap=2.0)
    loss.sum().backward()
    assert loss.item() == pytest.approx(-1.0)
    assert logp.grad.item() == pytest.approx(-1.0)


def test_mode_none_clips_against_the_behaviour_policy():
    """Without correction the ratio is pi/pi_behav = e^0.5 (1.65), clipped to 1.2 for A=+1."""
    logp = torch.tensor([-1.0])
    loss, stats = clipped_surrogate(logp, torch.tensor([-1.0]), torch.tensor([-1.5]),
                                    torch.tensor([1.0]), "none", 0.2, cap=2.0)
    assert loss.item() == pytest.approx(-1.2)
    assert stats["ratio"].item() == pytest.approx(math.exp(0.5))


def test_kl_k3_is_zero_on_policy_and_positive_off_it():
    """k3(logp=-1, ref=-1) = 0; k3(logp=-1, ref=-2) = e^-1 + 1 - 1 = 0.3679."""
    kl = kl_to_reference(torch.tensor([-1.0, -1.0]), torch.tensor([-1.0, -2.0]))
    assert kl.tolist() == pytest.approx([0.0, math.exp(-1.0)])


def test_token_logprobs_apply_the_temperature():
    """Logits (0, ln 3) at T=1 give p=(1/4, 3/4); at T=0.5 the odds square to 1:9."""
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    target = torch.tensor([[1]])
    assert token_logprobs(logits, target).item() == pytest.approx(math.log(0.75))
    assert token_logprobs(logits, target, 0.5).item() == pytest.approx(math.log(0.9))


def test_loss_divisors_by_hand():
    """Samples of 2 and 4 tokens: tokens 1/6 each; batch_tokens 12 (zero-signal tokens
    included) 1/12, and 1/6 per minibatch of two; sequence 1/(2*2) and 1/(2*4); constant
    batch 4 x 8 new tokens 1/32, 1/16 per minibatch of two."""
    assert sample_scales([2, 4], "tokens") == pytest.approx([1 / 6, 1 / 6])
    assert sample_scales([2, 4], "batch_tokens", batch_tokens=12) == pytest.approx([1 / 12] * 2)
    assert sample_scales([2, 4], "batch_tokens", batch_tokens=12, minibatches=2) == \
        pytest.approx([1 / 6] * 2)
    assert sample_scales([2, 4], "batch_tokens") == pytest.approx([1 / 6] * 2)  # not known
    assert sample_scales([2, 4], "sequence") == pytest.approx([1 / 4, 1 / 8])
    assert sample_scales([2, 4], "constant", batch_size=4, max_new_tokens=8) == \
        pytest.approx([1 / 32] * 2)
    assert sample_scales([2, 4], "constant", batch_size=4, max_new_tokens=8, minibatches=2) == \
        pytest.approx([1 / 16] * 2)
    assert sample_scales([0, 4], "sequence") == [0.0, 1 / 8]


def test_loss_divisors_sum_as_trl_loss_types_do():
    """Four rows of per-token losses, the last two zero-signal (loss 0, as a zero advantage
    gives): TRL's dapo, dr_grpo and grpo formulas (grpo_trainer.py, all rows kept) equal the
    scaled sums over what the learner trains: the two signal rows (batch_tokens, constant),
    or all four (sequence, as with zero_signal = "keep")."""
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]],
                        dtype=torch.float32)
    loss = torch.randn(4, 5) * mask
    loss[2:] = 0.0
    max_completion_length = 8
    trl = {"dapo": (loss * mask).sum() / mask.sum(),
           "dr_grpo": (loss * mask).sum() / (loss.size(0) * max_completion_length),
           "grpo": ((loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()}
    tokens = mask.sum(-1).int().tolist()
    row_sums = (loss * mask).sum(-1).tolist()

    def ours(rows, divisor):
        scales = sample_scales([tokens[r] for r in rows], divisor, batch_tokens=sum(tokens),
                               batch_size=4, max_new_tokens=max_completion_length)
        return sum(c * row_sums[r] for c, r in zip(scales, rows))

    assert ours([0, 1], "batch_tokens") == pytest.approx(float(trl["dapo"]))
    assert ours([0, 1], "constant") == pytest.approx(float(trl["dr_grpo"]))
    assert ours([0, 1, 2, 3], "sequence") == pytest.approx(float(trl["grpo"]))
    assert ours([0, 1], "tokens") == pytest.approx(sum(row_sums) / 6)
