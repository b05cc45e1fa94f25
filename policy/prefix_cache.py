"""The prefix cache: the KV cache of sequences the engine decoded, kept for their continuations.

Consumes, after a batch, each row's token ids (its context and all but the last sampled token,
the tokens the model has seen) with that row's keys and values per layer, under a tag naming
the weights that made them (`WeightsTag`); produces, for a new context, the longest stored
sequence under the same tag whose ids are an exact prefix of it, so only the rest is
prefilled. Keys are token ids, never text: a hit is a true prefix. Bounded by bytes, least
recently stored out first; an entry is taken out when it is used (its continuation supersedes
it) and every entry of a tag is dropped when those weights change. It runs no model.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import torch

Layers = list[tuple[torch.Tensor, torch.Tensor]]
"Per decoder layer, (keys, values), each [1, kv_heads, tokens, head_dim]."


class WeightsTag(NamedTuple):
    """Which weights made an entry: the pinned version (-1: the live weights), the dtype,
    and for the live weights the count of installs so far (a new install is new weights)."""

    pinned: int
    dtype: str
    installs: int


@dataclass(frozen=True)
class Prefix:
    """A stored sequence: its ids and what the model computed over them."""

    ids: tuple[int, ...]
    layers: Layers
    nbytes: int


@dataclass
class PrefixStats:
    """What the cache did, summed over its life."""

    hits: int = 0
    misses: int = 0
    reused_tokens: int = 0
    "Context tokens not prefilled again because an entry held them."
    evicted: int = 0
    prefilled_tokens: int = 0
    "Context tokens prefilled (what the hits left, and every token of a miss)."


class PrefixCache:
    """Stored prefixes by (tag, ids), at most `max_bytes` of keys and values (0: stores none)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[WeightsTag, tuple[int, ...]], Prefix] = OrderedDict()
        self.nbytes = 0
        self.stats = PrefixStats()

    def longest(self, tag: WeightsTag, context: Sequence[int]) -> Prefix | None:
        """The longest entry of `tag` that is a proper prefix of `context` (at least one token
        of it left to prefill), or None; counts a hit or a miss."""
        lengths = sorted({len(ids) for t, ids in self.entries if t == tag and len(ids) < len(context)},
                         reverse=True)
        for length in lengths:
            found = self.entries.get((tag, tuple(context[:length])))
            if found is not None:
                self.stats.hits += 1
                self.stats.reused_tokens += length
                return found
        self.stats.misses += 1
        return None

    def put(self, tag: WeightsTag, ids: Sequence[int], layers: Layers) -> None:
        """Store `layers` for `ids` under `tag`, evicting the oldest to fit; an
        entry larger than the whole budget is not stored."""
        nbytes = sum(k.nbytes + v.nbytes for k, v in layers)
        if nbytes > self.max_bytes:
            return
        key = (tag, tuple(ids))
        self._remove(key)
        while self.nbytes + nbytes > self.max_bytes:
            self._remove(next(iter(self.entries)))
            self.stats.evicted += 1
        self.entries[key] = Prefix(key[1], layers, nbytes)
        self.nbytes += nbytes

    def take(self, tag: WeightsTag, prefix: Prefix) -> None:
        """Take `prefix` out: it was continued, and the continuation is stored instead."""
        self._remove((tag, prefix.ids))

    def drop(self, pinned: int) -> None:
        """Drop every entry made by the live weights (`pinned` -1) or by the copy pinned at
        `pinned`: those weights are gone or changed."""
        for key in [k for k in self.entries if k[0].pinned == pinned]:
            self._remove(key)

    def _remove(self, key: tuple[WeightsTag, tuple[int, ...]]) -> None:
        gone = self.entries.pop(key, None)
        if gone is not None:
            self.nbytes -= gone.nbytes


def row_layers(layers: Layers, row: int, columns: torch.Tensor) -> Layers:
    """One row's keys and values at `columns` (its unmasked positions), copied out of a batch."""
    return [(k[row:row + 1, :, columns], v[row:row + 1, :, columns]) for k, v in layers]


RowState = tuple[torch.Tensor, torch.Tensor, Layers]
"One row after its prefill: next-token logits [1,V], attention mask [1,W], its layers."


def merge_rows(rows: list[RowState]) -> tuple[torch.Tensor, torch.Tensor, Layers]:
    """Rows of different widths as one batch, each left-padded with masked-out zeros to the
    widest: (logits [B,V], mask [B,W], layers [B,heads,W,dim])."""
    width = max(mask.shape[1] for _, mask, _ in rows)

    def pad(t: torch.Tensor, dim: int) -> torch.Tensor:
        missing = width - t.shape[dim]
        if not missing:
            return t
        shape = list(t.shape)
        shape[dim] = missing
        return torch.cat([t.new_zeros(shape), t], dim=dim)

    logits = torch.cat([lg for lg, _, _ in rows])
    mask = torch.cat([pad(m, 1) for _, m, _ in rows])
    layers = [(torch.cat([pad(r[2][i][0], 2) for r in rows]),
               torch.cat([pad(r[2][i][1], 2) for r in rows])) for i in range(len(rows[0][2]))]
    return logits, mask, layers
