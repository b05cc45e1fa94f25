"""The RL objective as pure functions: group-relative advantages, importance weights, the
clipped surrogate, and the KL penalty.

Consumes rewards of one group, or per-token log-probabilities under the current (`logp`:
the weights being optimised), proximal (`prox`: the learner's weights when this batch's
update began, detached), behaviour (`behav`: the weights that sampled it) and reference
policies; produces advantages, weights, per-token losses and the per-sample factors that sum
them into a loss (`sample_scales`); the off-policy corrections are `importance_weights`'s.
Nothing here knows about models, batches or the bus, so tests check each against numbers
worked out by hand.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

import torch

Correction = Literal["truncated", "decoupled", "icepop", "none"]
Divisor = Literal["tokens", "batch_tokens", "sequence", "constant"]


def group_advantages(rewards: Sequence[float | None], scale: bool = True,
                     eps: float = 1e-6) -> list[float | None]:
    """(r - mean) / std over the group's present rewards (population std); None stays None.

    A group with fewer than two present rewards, or all equal, has zero advantages.
    """
    present = [r for r in rewards if r is not None]
    if len(present) < 2:
        return [None if r is None else 0.0 for r in rewards]
    mean = sum(present) / len(present)
    std = math.sqrt(sum((r - mean) ** 2 for r in present) / len(present))
    if std < eps:
        return [None if r is None else 0.0 for r in rewards]
    div = std + eps if scale else 1.0
    return [None if r is None else (r - mean) / div for r in rewards]


def importance_weights(prox: torch.Tensor, behav: torch.Tensor, mode: Correction,
                       cap: float, floor: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token (weight, keep): the off-policy weight pi_prox/pi_behav and which tokens count.

    Corrections (`mode`), the surrogate clipped against prox unless said otherwise:
    - "truncated": weighted by min(prox/behav, cap) (truncated importance sampling);
    - "decoupled": weighted by prox/behav, tokens whose weight exceeds `cap` masked out
      (decoupled PPO);
    - "icepop": weighted by prox/behav, tokens whose weight lies outside [`floor`, `cap`] masked
      out, on both sides (IcePop): a token the behaviour policy found far likelier or far less
      likely than the trainer does gets no gradient at all;
    - "none": the surrogate clipped against behav, no weight (plain off-policy PPO).
    `floor` is the lower end of the band icepop keeps; the other modes ignore it. A masked token
    has weight 0 and `kept` 0, so it adds nothing to the loss or the gradient but still counts
    in the token mean (the learner reports the masked share as `masked_frac`)."""
    ones = torch.ones_like(prox)
    if mode == "none":
        return ones, ones
    weight = torch.exp(prox - behav)
    if mode == "truncated":
        return weight.clamp(max=cap), ones
    inside = weight <= cap
    if mode == "icepop":
        inside = inside & (weight >= floor)
    keep = inside.to(prox.dtype)
    return weight * keep, keep


def clipped_surrogate(logp: torch.Tensor, prox: torch.Tensor, behav: torch.Tensor,
                      advantages: torch.Tensor, mode: Correction, clip_eps: float,
                      cap: float, floor: float = 0.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss -min(r A, clip(r, 1-eps, 1+eps) A) * w, and per-token diagnostics.

    r = pi/pi_behav for mode "none", else pi/pi_prox; w from `importance_weights`.
    """
    base = behav if mode == "none" else prox
    ratio = torch.exp(logp - base)
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)
    plain, bounded = ratio * advantages, clipped * advantages
    surrogate = torch.minimum(plain, bounded)
    weight, keep = importance_weights(prox.detach(), behav, mode, cap, floor)
    loss = -surrogate * weight
    stats = {"ratio": ratio.detach(), "clipped": (bounded < plain).to(logp.dtype),
             "weight": weight, "kept": keep}
    return loss, stats


def sample_scales(tokens: Sequence[int], divisor: Divisor, *, batch_tokens: int = 0,
                  batch_size: int = 1, max_new_tokens: int = 1,
                  minibatches: int = 1) -> list[float]:
    """Per-sample factors c_i for one minibatch whose samples have `tokens` completion tokens
    each: its loss is sum_i c_i * sum_t loss_it. The batch is `minibatches` optimizer steps;
    TRL's `loss_type` is named where it is the same sum:

    - "tokens": 1 / sum(tokens), the token mean over the minibatch's trained samples;
    - "batch_tokens": minibatches / batch_tokens, where `batch_tokens` counts every completion
      token of the batch, zero-signal samples included though they are not trained (TRL's
      "dapo": its batch keeps them); 0 (not known) falls back to "tokens";
    - "sequence": 1 / (len(tokens) * tokens_i), each sample's token mean, then the mean over
      the minibatch's samples (TRL's "grpo", the original GRPO);
    - "constant": minibatches / (batch_size * max_new_tokens), the same for every batch
      whatever it holds (TRL's "dr_grpo", Dr. GRPO).
    A sample without tokens gets 0."""
    if divisor == "sequence":
        return [1.0 / (len(tokens) * n) if n else 0.0 for n in tokens]
    if divisor == "constant":
        total = batch_size * max_new_tokens / minibatches
    elif divisor == "batch_tokens" and batch_tokens > 0:
        total = batch_tokens / minibatches
    else:
        total = sum(tokens)
    return [1.0 / total if n and total > 0 else 0.0 for n in tokens]


def kl_to_reference(logp: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref): exp(ref - logp) - (ref - logp) - 1 (>= 0)."""
    delta = ref - logp
    return torch.exp(delta) - delta - 1.0


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor,
                   temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T)[target] per position; logits [B, T, V], targets [B, T]."""
    scaled = logits.float() / (temperature if temperature > 0 else 1.0)
    picked = scaled.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(scaled, dim=-1)


def masked_nll(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Summed negative log-likelihood of `targets` [B, T] where `mask` [B, T] is 1, under
    `logits` [B, T, V] at temperature 1: supervised fine-tuning's loss before its mean."""
    return -(token_logprobs(logits, targets) * mask).sum()
