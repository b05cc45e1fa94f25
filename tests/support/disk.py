"""A small filesystem for a test folder, and a file that fills it: the full disk of the tests.

Consumes a folder and a size; produces a tmpfs mounted there (root only, as in CI), removed
on leaving even when the test fails, and a filler file written until the filesystem refuses
more (ENOSPC). It judges nothing about what runs on that disk.
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
from pathlib import Path

BLOCKS = (1 << 20, 4096)
"Write sizes, largest first: the small one takes what a refused large block left."


def mount_tmpfs(folder: Path, size: str) -> None:
    """Mount a tmpfs of `size` (mount's units: "4m", "512m") at `folder`, made if missing."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)


def unmount(folder: Path) -> None:
    """Detach the filesystem at `folder` (lazily: a process may still hold a file there)."""
    subprocess.run(["umount", "-l", str(folder)], check=False)


@contextlib.contextmanager
def small_disk(folder: Path, size: str):
    """`folder` on a tmpfs of `size` for the block; unmounted after it."""
    mount_tmpfs(folder, size)
    try:
        yield folder
    finally:
        unmount(folder)


def fill(folder: Path) -> Path:
    """Write a filler file in `folder` until its filesystem is full; returns its path. Only
    ENOSPC ends it; another error raises."""
    filler = folder / "filler.bin"
    with open(filler, "wb", buffering=0) as out:
        for size in BLOCKS:
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    return filler
