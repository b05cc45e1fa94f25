"""A group's prompt read once per training forward, not once per attempt.

Consumes one rank's training samples; produces micro-batches whose rows share their prompt
(the tokens before a row's first sampled one), and the length of the prefix every row of a
micro-batch shares. The trainer runs that prefix as one row, repeats its key/value cache for
every row, and runs only the rest batched: the same log-probabilities and gradients as
running every row whole (float32: within 1e-4), at a fraction of the cost when prompts are
long and groups large. It runs no model; `policy.trainer` does.
"""

from __future__ import annotations

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
