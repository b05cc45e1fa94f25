"""The fake engine: uniform logits over a tiny character vocabulary, for tests.

Consumes sample requests and weight versions like any engine; produces real token ids
drawn from the uniform distribution over `fake_vocab` ids (id 0 ends the turn), with
logprobs that are exactly that distribution's (log 1/V at temperature 1 and top-p 1). It
shares the real sampling loop (`policy.sampling`); only the model is missing. Weights
are accepted and ignored: it has none.
"""

from __future__ import annotations

from typing import Any

import torch

from policy.chat import char_chat_format
from policy.engine import BatchingEngine, RowSettings
from policy.sampling import sample_rows


class FakeEngine(BatchingEngine):
    """An engine of uniform logits over a tiny vocabulary, for tests that need no model."""

    pins = True

    def __init__(self, generator_cfg: Any, seed: int) -> None:
        super().__init__(char_chat_format(generator_cfg.fake_vocab), generator_cfg.max_batch,
                         generator_cfg.max_in_flight)
        self.vocab = generator_cfg.fake_vocab
        self.rng = torch.Generator().manual_seed(seed)
        self.weight_bytes = 0
        self.pinned_bytes = 0

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 cache: object) -> tuple[torch.Tensor, object]:
        return torch.zeros((ids.shape[0], self.vocab)), cache

    def run_rows(self, contexts: list[list[int]], settings: list[RowSettings]) -> list[Any]:
        return sample_rows(self._forward, contexts, settings, self.chat, 0, self.rng)

    def apply_weights(self, blob: bytes | bytearray | None) -> None:
        self.weight_bytes = len(blob or b"")

    def apply_pinned(self, version: int, blob: bytes | bytearray | None, dtype: str) -> None:
        self.pinned_bytes = len(blob or b"")
