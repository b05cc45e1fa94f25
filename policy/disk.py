"""A full disk under the learner's checkpoints: recognised, and waited out.

Consumes the exception a checkpoint write raised and the folder it wrote to; says whether the
disk was full (ENOSPC anywhere in the exception's chain, or a write failure while the
folder's filesystem has less free than the checkpoint needs: torch's writer loses the errno
and says 'basic_ios::clear: iostream error' or 'unexpected pos'),
and waits until the filesystem has that room again; `save_with_room` does both around the
learner's checkpoint, for one rank or several (`Trainer.save` makes several agree on the
outcome). It decides nothing about what to keep.
"""

from __future__ import annotations

import errno
import shutil
import time
from pathlib import Path


import anyio
import structlog

log = structlog.get_logger("learner")

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


async def save_with_room(ranks, tag: str, client_state: dict, last_bytes: int, gauges: dict,
                         step: int) -> int:
    """Write checkpoint `tag` through `ranks` (a `policy.ranks.RankGroup`); on a full disk
    remove what it half wrote, say so once (`learner.disk_full`, gauge `learner.disk_full`
    1), wait for room and write it again (`learner.disk_room_back`). The caller's verdicts
    stay unacked meanwhile: nothing is lost, nothing trains while it waits. With several
    ranks, rank 0 raises a full disk that any rank met (`Trainer.save` makes them agree),
    and every rank discards and writes again. Returns the checkpoint's bytes (`last_bytes`:
    the previous one's, the room a next one needs)."""
    folder, paused = ranks.dir, 0.0
    while True:
        try:
            await ranks.call("save", tag, client_state)
            break
        except Exception as exc:  # noqa: BLE001 - only a full disk is waited out
            needed = max(last_bytes, 2 * folder_bytes(folder / tag), MIN_ROOM)
            if not is_disk_full(exc, folder, needed):
                raise
            await ranks.call("discard", tag)
            if not paused:
                log.warning("learner.disk_full", folder=str(folder), step=step,
                            free_mb=free_bytes(folder) // 2**20, needed_mb=needed // 2**20,
                            error=str(exc).splitlines()[0][:300] if str(exc) else repr(exc))
                paused = time.monotonic()
            gauges["learner.disk_full"] = 1.0
            await wait_for_room(folder, needed)
    if paused:
        gauges["learner.disk_full"] = 0.0
        log.info("learner.disk_room_back", folder=str(folder), step=step,
                 waited_s=round(time.monotonic() - paused, 1))
    return folder_bytes(folder / tag)
