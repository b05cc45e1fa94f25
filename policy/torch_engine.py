"""The transformers engine: batched sampling on CPU (default) or one GPU.

Consumes sample requests and weight versions through `policy.engine.BatchingEngine`;
produces samples with per-token logprobs. Each batch is left-padded and decoded with a KV
cache (`policy.sampling.sample_rows`). A row whose context begins with a sequence decoded
before by the same weights (the previous turn of its episode) starts from that sequence's
keys and values (`policy.prefix_cache`) and prefills only the tokens after it. A version that is a LoRA adapter is merged into the
weights (`policy.lora`): onto a copy of the base weights it adapts, kept from the first
adapter on, so versions never stack; a pinned copy is its own base plus that adapter. It
does not talk to the bus.
"""

from __future__ import annotations

import inspect
from typing import Any

import structlog
import torch

from policy import model as model_source
from policy.chat import hf_chat_format
from policy.engine import BatchingEngine, RowSettings
from policy.lora import Adapter, base_values, is_adapter, merge_adapter, read_adapter
from policy.precision import weights_dtype
from policy.prefix_cache import Layers, PrefixCache, RowState, WeightsTag, merge_rows, row_layers
from policy.sampling import Forward, padded_prefill, sample_rows
from policy.weights import decode_state, install_state

log = structlog.get_logger("policy.torch_engine")


class TorchEngine(BatchingEngine):
    """The `torch` engine: transformers on CPU or GPU, batched by `BatchingEngine`."""

    pins = True

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
        self.models = {self.dtype: self.model}
        "The weights in each dtype asked for (a row's `dtype`, e.g. float32 for eval)."
        self.state: dict | Adapter | None = None
        "The weights installed last (None: version 0; an Adapter: the base plus it), for a dtype loaded later."
        self.bases: dict[str, dict[str, torch.Tensor]] = {}
        "By dtype: the base values of the weights adapters change (kept from the first adapter on)."
        self.pinned_models: dict[int, Any] = {}
        "Pinned copies by version (`Engine.pin`): models of their own, untouched by `apply_weights`."
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.rng = torch.Generator(device=self.device).manual_seed(seed)
        # transformers renamed `past_key_values` to `cache` (5.x); take whichever it reads.
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self.prefixes = PrefixCache(generator_cfg.prefix_cache_mb * 2**20)
        "Keys and values of sequences decoded before, for their continuations."
        self.installs = 0
        "Weights installed into the live models so far: prefixes of older installs are stale."

    def _model(self, dtype: str) -> Any:
        """The policy in `dtype` ('' for the engine's own), loaded with the current weights
        the first time it is asked for."""
        dtype = dtype or self.dtype
        if dtype not in self.models:
            model = model_source.load_model(self.model_cfg, dtype, self.device)
            self.models[dtype] = model
            if self.state is not None:
                self._install(dtype, model)
            log.info("generator.dtype_loaded", dtype=dtype)
        return self.models[dtype]

    def run_rows(self, contexts: list[list[int]], settings: list[RowSettings]) -> list[Any]:
        pinned = settings[0].pinned
        model = self.pinned_models[pinned] if pinned >= 0 else self._model(settings[0].dtype)
        if self.threads and torch.get_num_threads() != self.threads:  # per worker thread
            torch.set_num_threads(self.threads)

        seen: dict[str, Any] = {}  # the mask and cache of the last step, for the prefixes

        def forward(ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                    cache: object) -> tuple[torch.Tensor, object]:
            if cache is None:
                from transformers import DynamicCache

                cache = DynamicCache(config=model.config)
            out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                        use_cache=True, logits_to_keep=1, **{self._cache_arg: cache})
            seen.update(mask=mask, cache=cache)
            return out.logits[:, -1, :], cache  # the cache object is filled in place

        tag = WeightsTag(pinned, settings[0].dtype or self.dtype, self.installs if pinned < 0 else 0)

        def prefill(contexts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, object]:
            logits, mask, cache = self._prefill(forward, model, tag, contexts)
            seen.update(mask=mask, cache=cache)
            return logits, mask, cache

        def select(cache: Any, rows: torch.Tensor) -> Any:
            cache.batch_select_indices(rows)
            return cache

        with torch.inference_mode():
            # Rows that finished leave the batch, unless their cache is kept for a later turn.
            results = sample_rows(forward, contexts, settings, self.chat, self.pad_id,
                                  self.rng, self.device, prefill,
                                  None if self.prefixes.max_bytes else select)
            if self.prefixes.max_bytes:
                self._keep(tag, contexts, results, seen["mask"], seen["cache"])
        return results

    def _prefill(self, forward: Forward, model: Any, tag: WeightsTag,
                 contexts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, object]:
        """The batch's prefill: rows with a stored prefix each extend its cache by the rest of
        their context (one row at a time, as their cached lengths differ), the others in one
        left-padded pass; then all are merged into one left-padded batch for decoding."""
        hits = [self.prefixes.longest(tag, c) if self.prefixes.max_bytes else None
                for c in contexts]
        if not any(hits):
            return self._fresh(forward, model, contexts)
        rows: list[RowState | None] = [None] * len(contexts)
        missed = [r for r, h in enumerate(hits) if h is None]
        if missed:
            logits, mask, cache = self._fresh(forward, model, [contexts[r] for r in missed])
            whole = _layers(cache)
            for i, r in enumerate(missed):
                rows[r] = (logits[i:i + 1], mask[i:i + 1],
                           [(k[i:i + 1], v[i:i + 1]) for k, v in whole])
        for r, hit in enumerate(hits):
            if hit is not None:
                rows[r] = self._extend(forward, model, hit.layers, contexts[r], len(hit.ids))
                self.prefixes.take(tag, hit)
        logits, mask, layers = merge_rows(rows)
        return logits, mask, _dynamic_cache(model, layers)

    def _fresh(self, forward: Forward, model: Any,
               contexts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, object]:
        """Contexts with nothing stored, in one left-padded pass; a context several rows share
        (a group's prompt) is read once and its row repeated."""
        first: dict[tuple[int, ...], int] = {}
        index = [first.setdefault(tuple(c), len(first)) for c in contexts]
        unique = [list(c) for c in first]
        self.prefixes.stats.prefilled_tokens += sum(map(len, unique))
        logits, mask, cache = padded_prefill(forward, unique, self.pad_id, self.device)
        if len(unique) == len(contexts):
            return logits, mask, cache
        rows = torch.tensor(index, device=self.device)
        return logits[rows], mask[rows], _dynamic_cache(
            model, [(k[rows], v[rows]) for k, v in _layers(cache)])

    def _extend(self, forward: Forward, model: Any, layers: Layers, context: list[int],
                cached: int) -> RowState:
        """One row's prefill from the cache of its first `cached` tokens."""
        self.prefixes.stats.prefilled_tokens += len(context) - cached
        ids = torch.tensor([context[cached:]], dtype=torch.long, device=self.device)
        mask = torch.ones((1, len(context)), dtype=torch.long, device=self.device)
        positions = torch.arange(cached, len(context), device=self.device)[None]
        logits, cache = forward(ids, mask, positions, _dynamic_cache(model, layers))
        return logits, mask, _layers(cache)

    def _keep(self, tag: WeightsTag, contexts: list[list[int]], results: list[Any],
              mask: torch.Tensor, cache: object) -> None:
        """Store each row's sequence: its context and every sampled token but the last (the
        one the model has not read yet), at the columns its mask kept."""
        layers = _layers(cache)
        for r, (context, result) in enumerate(zip(contexts, results)):
            ids = context + result.token_ids[:-1]
            columns = mask[r].nonzero().squeeze(-1)
            if len(columns) != len(ids):  # never reuse what does not line up: a miss later
                log.warning("generator.prefix_not_kept", row=r, cached=len(columns),
                            tokens=len(ids))
                continue
            self.prefixes.put(tag, ids, row_layers(layers, r, columns))

    @property
    def stats(self) -> dict[str, float]:
        made = self.prefixes.stats
        return {**super().stats, "prefix_hits": float(made.hits),
                "prefill_reused_tokens": float(made.reused_tokens),
                "prefill_tokens": float(made.prefilled_tokens)}

    def apply_weights(self, blob: bytes | bytearray | None) -> None:
        state = None if blob is None else \
            read_adapter(blob) if is_adapter(blob) else decode_state(blob)
        if isinstance(state, Adapter) and isinstance(self.state, dict):
            self.bases.clear()  # full weights ran last: start again from the whole base
        self.state = state
        self.installs += 1
        self.prefixes.drop(-1)
        for dtype, model in self.models.items():
            self._install(dtype, model)

    def _install(self, dtype: str, model: Any) -> None:
        """Put `self.state` into `model` (of `dtype`)."""
        state = self.state
        with torch.inference_mode():
            if isinstance(state, Adapter):
                if not state.factors.keys() <= self.bases.get(dtype, {}).keys():
                    # the first adapter: install the whole base, keep a copy of what it adapts
                    fresh = model_source.load_model(self.model_cfg, dtype, self.device)
                    self.bases[dtype] = base_values(fresh, list(state.factors))
                    install_state(model, fresh.state_dict())
                merge_adapter(model, state, self.bases[dtype])
                return
            if state is None:
                state = model_source.load_model(self.model_cfg, dtype, self.device).state_dict()
            install_state(model, state)

    def apply_pinned(self, version: int, blob: bytes | bytearray | None, dtype: str) -> None:
        model = model_source.load_model(self.model_cfg, dtype or self.dtype, self.device)
        if blob is not None:
            with torch.inference_mode():
                if is_adapter(blob):  # a fresh model is the base: merge onto it
                    merge_adapter(model, read_adapter(blob))
                else:
                    install_state(model, decode_state(blob))
        self.pinned_models[version] = model
        self.prefixes.drop(version)

    def drop_pinned(self, version: int) -> None:
        self.pinned_models.pop(version, None)
        self.prefixes.drop(version)


def _layers(cache: Any) -> Layers:
    """A transformers `DynamicCache`'s keys and values per layer."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def _dynamic_cache(model: Any, layers: Layers) -> Any:
    """A `DynamicCache` for `model` holding `layers`."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=layers, config=model.config)
