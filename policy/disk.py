"""A full disk under the learner's checkpoints: recognised, and waited out.

Consumes the exception a checkpoint write raised and the folder it wrote to; says whether the
disk was full (ENOSPC anywhere in the exception's chain, or a write failure while the
folder's filesystem has less free than the checkpoint needs: torch's writer loses the errno
and says 'basic_ios::clear: iostream error' or 'unexpected pos'),
and waits until the filesystem has that room again. It decides nothing about what to keep.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import anyio

MIN_ROOM = 64 * 1024 * 1024
"Free bytes below which a failed write counts as a full disk when the error lost its errno."


def free_bytes(folder: Path) -> int:
    """Free bytes on the filesystem holding `folder` (its nearest existing parent)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under `folder` (0 if it does not exist)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def is_disk_full(exc: BaseException, folder: Path, needed: int) -> bool:
    """Whether `exc`, raised writing under `folder`, means its disk is full."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__ or seen.__context__
    return free_bytes(folder) < max(needed, MIN_ROOM)  # torch's writer says 'iostream error'



async def wait_for_room(folder: Path, needed: int, *, poll_s: float = 2.0) -> int:
    """Return (the free bytes) once the filesystem under `folder` has `needed` bytes free."""
    while (free := free_bytes(folder)) < needed:
        await anyio.sleep(poll_s)
    return free
