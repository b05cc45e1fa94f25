"""Weights as bytes: a model's state dict to bf16 safetensors and back.

Consumes a state dict (learner side) or bytes (generator side); produces safetensors bytes
or tensors installed into a model. Tied weights (SmolLM2's lm_head shares the embedding)
are stored once: safetensors refuses aliased tensors, and the receiving model re-ties them.
It does no I/O; `policy.versions` moves the bytes.
"""

from __future__ import annotations

from typing import Any

import torch
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes


def encode_state(state: dict[str, torch.Tensor], dtype: torch.dtype = torch.bfloat16) -> bytes:
    """Safetensors bytes of `state` in `dtype`, each shared storage stored once."""
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if tensor.numel() and key in seen:
            continue
        seen[key] = name
        out[name] = tensor.detach().to("cpu", dtype).contiguous()
    return save_bytes(out)


def decode_state(blob: bytes) -> dict[str, torch.Tensor]:
    """The tensors in safetensors bytes."""
    return load_bytes(blob)


def tied_names(model: Any) -> set[str]:
    """Parameter names that alias another parameter in `model` (kept once on the wire)."""
    seen: dict[int, str] = {}
    tied = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        ptr = tensor.data_ptr()
        if ptr in seen and tensor.numel():
            tied.add(name)
        seen.setdefault(ptr, name)
    return tied


def install_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Copy `state` into `model` in place; every weight must be covered, tied ones aside."""
    result = model.load_state_dict(state, strict=False)
    missing = set(result.missing_keys) - tied_names(model)
    if missing or result.unexpected_keys:
        raise ValueError(f"weights do not fit the model: missing {sorted(missing)[:5]}, "
                         f"unexpected {sorted(result.unexpected_keys)[:5]}")
