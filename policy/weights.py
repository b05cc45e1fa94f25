"""Weights as bytes: a model's state dict to bf16 safetensors and back, without extra copies.

Consumes a state dict (learner side) or a buffer (generator side); produces the parts of a
safetensors file (a header, then each tensor's own memory, so nothing is concatenated
before it goes on the wire) or tensors viewing a received buffer (no copy until they are
installed in the model). The layout is standard safetensors: `safetensors.torch.load` and
vLLM read it. Tied weights (SmolLM2's lm_head shares the embedding) are stored once, and the
receiving model re-ties them. It does no I/O; `policy.versions` moves the bytes.
"""

from __future__ import annotations

import json
from typing import Any

import torch

_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
_NAMES = {v: k for k, v in _DTYPES.items()}


def encode_parts(state: dict[str, torch.Tensor], dtype: torch.dtype = torch.bfloat16,
                 copy: bool = False, metadata: dict[str, str] | None = None) -> list[memoryview]:
    """A safetensors file of `state` in `dtype` as [header, tensor bytes...]; each shared
    storage is stored once; `metadata` joins the header's `__metadata__`. Unless `copy`,
    parts may view the tensors themselves."""
    tensors: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int, tuple[int, ...]]] = set()
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        tensors[name] = tensor.detach().to("cpu", dtype, copy=copy).contiguous()
    header: dict[str, Any] = {"__metadata__": {"format": "pt", **(metadata or {})}}
    offset = 0
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": _NAMES[dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    parts = [memoryview(len(text).to_bytes(8, "little") + text)]
    parts += [memoryview(t.view(-1).view(torch.uint8).numpy()) for t in tensors.values()]
    return parts


def encode_state(state: dict[str, torch.Tensor], dtype: torch.dtype = torch.bfloat16) -> bytes:
    """The same file as one bytes object."""
    return b"".join(encode_parts(state, dtype))


def read_metadata(buffer: bytes | bytearray | memoryview) -> dict[str, str]:
    """The `__metadata__` of a safetensors `buffer` (strings only, by the format)."""
    size = int.from_bytes(bytes(buffer[:8]), "little")
    return dict(json.loads(bytes(buffer[8:8 + size])).get("__metadata__") or {})


def decode_state(buffer: bytes | bytearray | memoryview) -> dict[str, torch.Tensor]:
    """Tensors viewing a safetensors `buffer` (a bytearray is not copied)."""
    if not isinstance(buffer, bytearray):
        buffer = bytearray(buffer)
    size = int.from_bytes(buffer[:8], "little")
    header = json.loads(bytes(buffer[8:8 + size]))
    header.pop("__metadata__", None)
    base = 8 + size
    out = {}
    for name, meta in header.items():
        dtype = _DTYPES[meta["dtype"]]
        begin, end = meta["data_offsets"]
        count = (end - begin) // torch.empty((), dtype=dtype).element_size()
        flat = torch.frombuffer(buffer, dtype=dtype, count=count, offset=base + begin) if count \
            else torch.empty(0, dtype=dtype)
        out[name] = flat.view(meta["shape"])
    return out


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
