"""The demonstrations file: JSON lines of `bus.messages.Demo`, as `whet demos` writes it.

Consumes demonstrations, or a file's bytes; produces the file (written whole, then moved into
place, so a reader never sees half of it) or the demonstrations, in file order. A bad line
stops the read with an `InputError` naming the file, the line and what is wrong: a warm
start trains on all of the file or none of it. It lives in `bus/`, beside `bus.jsonlines`, so
`envs` (which writes it) and `policy` (which trains on it) share one reader. It makes no
demonstrations.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from bus.errors import InputError
from bus.jsonlines import numbered_lines
from bus.messages import Demo

_DECODER = msgspec.json.Decoder(Demo)
_ENCODER = msgspec.json.Encoder()


def write_demos(path: str | Path, demos: list[Demo]) -> None:
    """Write `demos` to `path`, one JSON line each."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    tmp.write_bytes(b"".join(_ENCODER.encode(d) + b"\n" for d in demos))
    tmp.replace(target)


def read_demos(path: str | Path) -> list[Demo]:
    """Every demonstration in the file at `path`; InputError at the first bad line (line 0:
    the file cannot be read, is empty or is not text)."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(source, 0, "", f"cannot read: {exc.strerror}") from None
    lines, too_long = numbered_lines(data, source)
    if too_long:
        raise too_long[0]
    out = []
    for line_no, line in lines:
        try:
            out.append(_DECODER.decode(line))
        except msgspec.ValidationError as exc:
            raise InputError(source, line_no, "", f"not a demonstration: {exc}") from None
        except msgspec.DecodeError as exc:
            raise InputError(source, line_no, "", f"not JSON: {exc}") from None
    return out
