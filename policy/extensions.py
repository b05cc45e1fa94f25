"""Where DeepSpeed's just-in-time CPU ops are built, and what to do with a build left locked.

Consumes the Python environment's prefix and the extensions folder; produces a folder per
environment (so two checkouts or virtual environments on one machine do not rebuild each
other's ops: torch rebuilds when the include paths differ, under one shared lock) and
removes a build lock no live build can hold (a learner killed mid-build leaves its `lock`
file behind, and every later learner would wait on it forever); keeps a single rank from
building the shared-memory op it has no use for. It builds nothing itself.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import structlog

log = structlog.get_logger("policy.extensions")

STALE_LOCK_S = 600.0
"A build of these ops takes well under a minute; a lock this old has no builder left."


def extensions_dir(prefix: str = sys.prefix, base: Path | None = None) -> Path:
    """The torch extensions folder of the environment at `prefix` (its path unresolved: a
    symlinked venv in another checkout builds against other include paths)."""
    root = base or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "torch_extensions"
    return root / f"whet-{hashlib.sha256(prefix.encode()).hexdigest()[:12]}"


def clear_stale_locks(folder: Path, now: float | None = None) -> list[Path]:
    """Remove build locks under `folder` older than STALE_LOCK_S; returns those removed."""
    now = time.time() if now is None else now
    removed = []
    for lock in folder.glob("**/lock"):
        try:
            if now - lock.stat().st_mtime > STALE_LOCK_S:
                lock.unlink()
                removed.append(lock)
        except OSError:
            continue  # taken or cleared meanwhile
    for lock in removed:
        log.warning("learner.stale_build_lock_removed", lock=str(lock), older_than_s=STALE_LOCK_S)
    return removed


def prepare() -> Path:
    """Point torch at this environment's extensions folder (unless the user chose one) and
    clear stale locks there; call before importing deepspeed."""
    folder = Path(os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir())))
    if folder.exists():
        clear_stale_locks(folder)
    return folder


def skip_shared_memory_op(world: int) -> bool:
    """On one rank, keep DeepSpeed from compiling its CPU shared-memory all-reduce op: no peer
    shares memory with it, and on a fresh machine the build takes about a minute of CPU before
    the first update. Call before `deepspeed.init_distributed`; True when it was skipped."""
    if world != 1:
        return False
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    return True
