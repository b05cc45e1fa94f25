"""The transformers engine: batched sampling on CPU (default) or one GPU.

Consumes sample requests and weight versions through `policy.engine.BatchingEngine`;
produces samples with per-token logprobs. Each batch is left-padded and decoded with a KV
cache (`policy.sampling.sample_rows`). It does not talk to the bus.
"""

from __future__ import annotations

import inspect
from typing import Any

import structlog
import torch

from policy import model as model_source
from policy.chat import hf_chat_format
from policy.engine import BatchingEngine, RowSettings
from policy.precision import weights_dtype
from policy.sampling import sample_rows
from policy.weights import decode_state, install_state

log = structlog.get_logger("policy.torch_engine")


class TorchEngine(BatchingEngine):
    def __init__(self, generator_cfg: Any, model_cfg: Any, seed: int) -> None:
        tokenizer = model_source.load_tokenizer(model_cfg)
        super().__init__(hf_chat_format(tokenizer), generator_cfg.max_batch,
                         generator_cfg.max_in_flight)
        self.model_cfg = model_cfg
        self.device = generator_cfg.device
        self.dtype = weights_dtype(generator_cfg.dtype, self.device)
        log.info("generator.dtype_chosen", dtype=self.dtype, setting=generator_cfg.dtype,
                 device=self.device)
        self.model = model_source.load_model(model_cfg, self.dtype, self.device)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.rng = torch.Generator(device=self.device).manual_seed(seed)
        # transformers renamed `past_key_values` to `cache` (5.x); take whichever it reads.
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 cache: object) -> tuple[torch.Tensor, object]:
        if cache is None:
            from transformers import DynamicCache

            cache = DynamicCache(config=self.model.config)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         use_cache=True, logits_to_keep=1, **{self._cache_arg: cache})
        return out.logits[:, -1, :], cache  # the cache object is filled in place

    def run_rows(self, contexts: list[list[int]], settings: list[RowSettings]) -> list[Any]:
        with torch.inference_mode():
            return sample_rows(self._forward, contexts, settings, self.chat, self.pad_id,
                               self.rng, self.device)

    def apply_weights(self, blob: bytes | bytearray | None) -> None:
        if blob is None:
            fresh = model_source.load_model(self.model_cfg, self.dtype, self.device)
            state = fresh.state_dict()
        else:
            state = decode_state(blob)
        with torch.inference_mode():
            install_state(self.model, state)
