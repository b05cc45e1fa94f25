"""The generation engines, and the one the config names.

Consumes `[generator]` and `[model]`; produces an open `policy.engine.Engine` with its
version-0 weights loaded. Engines:

- `torch`  (policy.torch_engine): transformers, CPU or GPU, batched by `BatchingEngine`;
- `vllm`   (policy.vllm_engine): vLLM's own continuous batching (GPU, `gpu` extra);
- `fake`   (policy.fake_engine): uniform logits over a tiny vocabulary, for tests.

It imports only what the chosen engine needs, when it is chosen.
"""

from __future__ import annotations

from typing import Any

from policy.engine import Engine


def open_engine(generator_cfg: Any, model_cfg: Any, seed: int, lora: Any = None) -> Engine:
    """The engine named by `generator_cfg.engine`, with its version-0 weights loaded
    (`lora`: the learner's `[learner] lora`, which vLLM must know before it starts)."""
    kind = generator_cfg.engine
    if kind == "fake":
        from policy.fake_engine import FakeEngine

        return FakeEngine(generator_cfg, seed)
    if kind == "torch":
        from policy.torch_engine import TorchEngine

        return TorchEngine(generator_cfg, model_cfg, seed)
    from policy.vllm_engine import VllmEngine

    return VllmEngine(generator_cfg, model_cfg, seed, lora)

