"""LoRA adapters: a model wrapped for training, an adapter as version bytes, adapters merged.

Consumes `LoraSettings` and a model (learner, export), or a version's safetensors bytes
(generators); produces a PEFT-wrapped model whose only trainable weights are the adapters,
the adapter's bytes in PEFT's own file layout (`adapter_model.safetensors` keys, so vLLM and
PEFT read them as they are) with rank, alpha and base in the header, and merged weights
W = W_base + (alpha / rank) * B @ A written into a plain model. It does no I/O and knows
nothing of versions or the bus; PEFT is imported only where a model is wrapped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from policy.config import LoraSettings
from policy.weights import decode_state, encode_parts, read_metadata

METADATA_KEY = "whet.lora"
"Header entry that marks a version's bytes as an adapter (JSON: r, lora_alpha, target_modules, base)."
PEFT_PREFIX = "base_model.model."
"PEFT's prefix on every adapter weight name."


def peft_config(settings: LoraSettings, base: str = "") -> Any:
    """PEFT's `LoraConfig` for `settings` (`base`: the base model folder, for adapter_config.json)."""
    from peft import LoraConfig

    return LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                      target_modules=list(settings.target_modules), bias="none",
                      base_model_name_or_path=base or None)


def wrap(model: Any, settings: LoraSettings) -> Any:
    """`model` with adapters on `settings.target_modules`; the rest is frozen. Fresh
    adapters change nothing (B starts at zero). PEFT's error names missing modules."""
    from peft import get_peft_model

    return get_peft_model(model, peft_config(settings))


def trainable_state_only(model: Any) -> None:
    """Make `model.state_dict()` hold only its trainable weights (a checkpoint then holds the
    adapters, not the frozen base). DeepSpeed's `exclude_frozen_parameters` alone keeps a
    tied alias of a frozen weight (SmolLM2's lm_head, the whole embedding)."""
    frozen = {n for n, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}

    def drop_frozen(module: Any, state: dict, prefix: str, local_metadata: Any) -> None:
        for name in frozen:
            state.pop(prefix + name, None)

    model.register_state_dict_post_hook(drop_frozen)


def adapter_state(model: Any) -> dict[str, torch.Tensor]:
    """The adapter weights of a wrapped model, named as in PEFT's adapter_model.safetensors."""
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(model)


def encode_adapter(state: dict[str, torch.Tensor], settings: LoraSettings, base: str,
                   copy: bool = False) -> list[memoryview]:
    """A version's bytes for adapter `state`: bf16 safetensors (as full weights travel),
    marked with rank, alpha, target modules and the base they apply to."""
    header = {"r": settings.rank, "lora_alpha": settings.alpha,
              "target_modules": sorted(settings.target_modules), "base": base}
    return encode_parts(state, copy=copy, metadata={METADATA_KEY: json.dumps(header)})


@dataclass(frozen=True)
class Adapter:
    """An adapter read from a version's bytes: its factors by the weight each adapts."""

    factors: dict[str, tuple[torch.Tensor, torch.Tensor]]
    "Plain-model weight name (`model.layers.0.self_attn.q_proj.weight`) -> (A, B)."
    rank: int
    alpha: float
    target_modules: list[str]
    base: str
    "The base model it was trained on ([model] name or path)."

    @property
    def scale(self) -> float:
        """alpha / rank: the factor of B @ A (PEFT's, without rsLoRA)."""
        return self.alpha / self.rank

    def config_json(self, base_folder: str) -> dict[str, Any]:
        """adapter_config.json for this adapter on the base at `base_folder`."""
        return adapter_config_json(self.rank, self.alpha, self.target_modules, base_folder)


def adapter_config_json(rank: int, alpha: float, targets: Sequence[str],
                        base_folder: str) -> dict[str, Any]:
    """The adapter_config.json PEFT and vLLM read: a plain LoRA (no rsLoRA, DoRA or bias)."""
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": alpha,
            "lora_dropout": 0.0, "target_modules": sorted(targets), "bias": "none",
            "fan_in_fan_out": False, "use_rslora": False, "use_dora": False,
            "inference_mode": True, "base_model_name_or_path": base_folder}


def is_adapter(blob: bytes | bytearray | memoryview | None) -> bool:
    """True when a version's bytes hold an adapter rather than full weights."""
    return blob is not None and METADATA_KEY in read_metadata(blob)


def read_adapter(blob: bytes | bytearray | memoryview) -> Adapter:
    """The adapter in a version's bytes (ValueError when they hold full weights or a
    weight has only one of its two factors)."""
    meta = read_metadata(blob)
    if METADATA_KEY not in meta:
        raise ValueError("these weights are a full model, not a LoRA adapter")
    header = json.loads(meta[METADATA_KEY])
    return Adapter(factors=factors_of(decode_state(blob)), rank=int(header["r"]),
                   alpha=float(header["lora_alpha"]),
                   target_modules=list(header["target_modules"]), base=str(header["base"]))


def factors_of(state: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """PEFT-named adapter weights as (A, B) by the plain-model weight they adapt."""
    halves: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in state.items():
        name = key.removeprefix(PEFT_PREFIX)
        for half in ("lora_A", "lora_B"):
            marker = f".{half}."
            if marker in name:
                module = name.split(marker)[0]
                halves.setdefault(f"{module}.weight", {})[half] = tensor
    broken = sorted(n for n, h in halves.items() if len(h) != 2)
    if broken or not halves:
        raise ValueError(f"adapter weights incomplete: {broken[:3] or 'no lora_A/lora_B pairs'}")
    return {name: (h["lora_A"], h["lora_B"]) for name, h in halves.items()}


def merge_adapter(model: Any, adapter: Adapter,
                  base: dict[str, torch.Tensor] | None = None) -> None:
    """Set each adapted weight of plain `model` to base + scale * B @ A (computed in float32,
    stored in the weight's dtype); `base`: the base values by name (default: the weights
    `model` holds now). ValueError when the adapter does not fit the model."""
    params = dict(model.named_parameters())
    wrong = [n for n, (a, b) in adapter.factors.items()
             if n not in params or tuple(params[n].shape) != (b.shape[0], a.shape[1])]
    if wrong:
        raise ValueError(f"adapter does not fit the model: {wrong[:3]}")
    with torch.no_grad():
        for name, (a, b) in adapter.factors.items():
            target = params[name]
            source = target if base is None else base[name]
            delta = (b.to(target.device, torch.float32) @ a.to(target.device, torch.float32))
            target.copy_((source.float() + adapter.scale * delta).to(target.dtype))


def base_values(model: Any, names: Sequence[str]) -> dict[str, torch.Tensor]:
    """Copies of `model`'s weights `names` (the base an adapter is merged onto)."""
    params = dict(model.named_parameters())
    return {n: params[n].detach().clone() for n in names if n in params}
