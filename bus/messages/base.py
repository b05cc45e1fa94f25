"""The bases of every wire message: `Message` (tagged, top level) and `Part` (nested), and
`tag_of`. No I/O."""

from __future__ import annotations

import msgspec


class Message(msgspec.Struct, kw_only=True, tag_field="t"):
    """Base of every top-level message; subclasses set `tag="whet.<name>.v<N>"`."""


class Part(msgspec.Struct, kw_only=True, frozen=True):
    """Base of structs nested inside messages: untagged, and frozen so they can be defaults."""


def tag_of(cls: type[Message]) -> str:
    """The wire tag of a message type, e.g. 'whet.task.v1'."""
    return cls.__struct_config__.tag  # type: ignore[return-value]
