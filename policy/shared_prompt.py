"""A group's prompt read once per training forward, not once per attempt.

Consumes one rank's training samples; produces micro-batches whose rows share their prompt
(the tokens before a row's first sampled one), the length of the prefix every row of a
micro-batch shares, and the logits of such a micro-batch with that prefix run once, as one
row whose key/value cache serves every row: the same log-probabilities and gradients as
running every row whole (float32: within 1e-4), at a fraction of the cost when prompts are
long and groups large. It knows no optimizer; `policy.trainer` calls it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from policy.batch import TrainSample, split_even


def first_sampled(sample: TrainSample) -> int:
    """Index of the sample's first sampled token (its length when none was sampled)."""
    hits = np.flatnonzero(sample.sampled)
    return int(hits[0]) if hits.size else len(sample.ids)


def by_prompt(samples: list[TrainSample], size: int) -> list[list[TrainSample]]:
    """Micro-batches of at most `size` samples, each holding samples of one prompt (in the
    order prompts first appear), longest first within a prompt to pad little."""
    groups: dict[bytes, list[TrainSample]] = {}
    for s in samples:
        groups.setdefault(s.ids[:first_sampled(s)].tobytes(), []).append(s)
    micros = []
    for members in groups.values():
        members = sorted(members, key=lambda s: -len(s.ids))
        micros += split_even(members, -(-len(members) // size))
    return micros


def shared_prefix(samples: list[TrainSample]) -> int:
    """How many leading tokens every row holds alike and no row is scored on: the prefix one
    forward can read for all. At most the first sampled index less one (the logit that scores
    the first sampled token must come from the rows' own pass); 0 for fewer than two rows."""
    if len(samples) < 2:
        return 0
    cap = min(first_sampled(s) for s in samples) - 1
    if cap < 1:
        return 0
    rows = np.stack([s.ids[:cap] for s in samples])
    differs = np.flatnonzero((rows != rows[0]).any(axis=0))
    return int(differs[0]) if differs.size else cap


def micro_batches(per_rank: list[list[TrainSample]], rank: int, size: int,
                  filler: TrainSample, prompt_wise: bool) -> list[list[TrainSample]]:
    """`rank`'s micro-batches of its shard (`per_rank`: every rank's): `prompt_wise`, each
    holds one prompt's samples (`by_prompt`); else the shard split evenly. Every rank gets
    as many as the rank with most (ZeRO's collectives), an empty one holding `filler`."""
    if prompt_wise:
        split = [by_prompt(p, size) for p in per_rank]
    else:
        count = max(math.ceil(len(p) / size) for p in per_rank)
        split = [split_even(p, max(1, count)) for p in per_rank]
    count = max(1, max(len(m) for m in split))
    mine = split[rank] + [[]] * (count - len(split[rank]))
    return [m or [filler] for m in mine]


def prefix_logits(model: Any, ids: Any, start: int, config: Any, cache_arg: str) -> Any:
    """Logits [B, T - start, V] of `ids` [B, T] from position `start` on; the first `start`
    tokens (alike in every row) run once as one row, their cache (made here, filled in
    place, passed as `cache_arg`: transformers 5 says `cache`, 4.x `past_key_values`)
    repeated for every row, gradients flowing back through the repeat. Rows are right-padded
    and attention causal, so no real token sees a pad: no mask, the fast causal path."""
    if not start:
        return model(input_ids=ids).logits
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    model(input_ids=ids[:1, :start], use_cache=True, **{cache_arg: cache})
    cache.batch_repeat_interleave(ids.shape[0])
    return model(input_ids=ids[:, start:], use_cache=True, **{cache_arg: cache}).logits
