"""MessagePack encoding and decoding of bus messages, and packed numeric arrays.

Consumes message Structs or raw payload bytes; produces bytes or Structs. Pure: no I/O, no
subjects. A payload that cannot become the expected type raises `MalformedMessage` or
`SchemaMismatch`, each naming what was wrong and where, so a consumer can dead-letter it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TypeVar

import msgspec
import numpy as np

from bus.errors import MalformedMessage, SchemaMismatch
from bus.messages import Message, tag_of

M = TypeVar("M", bound=Message)

_encoder = msgspec.msgpack.Encoder()


def encode(msg: Message) -> bytes:
    """Encode a message as MessagePack (a map with the tag under `t`)."""
    return _encoder.encode(msg)


@lru_cache(maxsize=None)
def _decoder(cls: type[M]) -> msgspec.msgpack.Decoder:
    return msgspec.msgpack.Decoder(cls)


def decode(data: bytes, cls: type[M]) -> M:
    """Decode `data` as `cls`, or raise MalformedMessage / SchemaMismatch naming the problem."""
    try:
        return _decoder(cls).decode(data)
    except msgspec.ValidationError as exc:
        raise _explain(data, cls, exc) from None
    except msgspec.DecodeError as exc:
        raise MalformedMessage(f"not MessagePack: {exc}") from None


def _explain(data: bytes, cls: type[Message], exc: msgspec.ValidationError) -> Exception:
    """Tell a wrong version or type apart from a merely malformed message."""
    expected = tag_of(cls)
    try:
        raw = msgspec.msgpack.decode(data)
    except msgspec.DecodeError:
        return MalformedMessage(f"{expected}: {exc}")
    tag = raw.get("t") if isinstance(raw, dict) else None
    if isinstance(tag, str) and tag != expected:
        name, _, _ = expected.rpartition(".")
        if tag.rpartition(".")[0] == name:
            return SchemaMismatch(f"got {tag}, this build reads {expected}")
        return SchemaMismatch(f"got message type {tag}, expected {expected}")
    return MalformedMessage(f"{expected}: {exc}")


# --- packed arrays: token ids and logprobs travel as raw little-endian bytes ---------------


def pack_ids(ids: object) -> bytes:
    """Pack token ids (list or array) as int32 little-endian bytes."""
    return np.asarray(ids, dtype="<i4").tobytes()


def unpack_ids(data: bytes) -> np.ndarray:
    """Unpack int32 little-endian bytes into a read-only int32 array (no copy)."""
    return np.frombuffer(data, dtype="<i4")


def pack_f32(values: object) -> bytes:
    """Pack floats (list or array) as float32 little-endian bytes."""
    return np.asarray(values, dtype="<f4").tobytes()


def unpack_f32(data: bytes) -> np.ndarray:
    """Unpack float32 little-endian bytes into a read-only float32 array (no copy)."""
    return np.frombuffer(data, dtype="<f4")
