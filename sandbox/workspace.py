"""Workspaces of tool episodes: a folder that keeps its state across tool calls, restored from
a cache of prepared workspaces.

Consumes a task's files (and, for preparation, a function that computes what a prepared
workspace records, e.g. the visible tests' first run); produces `Workspace`s: folders on
this host whose files the episode's tools list, read, write and snapshot, every path checked
(`Workspace.path`) and sizes capped (`MAX_FILES`, `MAX_BYTES`). `WorkspaceCache` builds a
task's workspace once and restores copies of it. Folders are named after this process's id;
`reap_stale` removes those of dead processes. It runs no sandboxed code itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

import anyio

MAX_FILES = 200
MAX_BYTES = 256 << 10
"""Most files, and most bytes of all files together, a workspace may hold (its files travel
in one session reply and one job, under NATS's 1 MiB message limit)."""


class PathRefused(ValueError):
    """A path that is not a plain relative path inside the workspace."""


def digest_of(files: dict[str, str]) -> str:
    """Content hash of a workspace (names and bytes): equal workspaces, equal digests."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


@dataclass
class Workspace:
    """One episode's folder, and the paths it tried to write outside it."""

    root: Path
    refused: list[str] = field(default_factory=list)
    "Paths the episode tried to write outside the workspace (a hack sign)."
    prepared: dict = field(default_factory=dict)
    "What preparation recorded (the cache's, when restored)."

    def path(self, rel: str, *, for_write: bool = False) -> Path:
        """The checked host path of `rel`; PathRefused when it would leave the folder."""
        if not rel or "\x00" in rel or posixpath.normpath(rel) == ".":
            raise PathRefused(f"{rel!r}: name a file inside the repository")
        rel = posixpath.normpath(rel)
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts:
            if for_write:
                self.refused.append(rel[:200])
            raise PathRefused(f"{rel!r}: give a relative path inside the repository")
        here = self.root
        for part in parts:
            here = here / part
            if here.is_symlink():
                if for_write:
                    self.refused.append(rel[:200])
                raise PathRefused(f"{rel!r}: links are not followed")
        return here

    def files(self) -> dict[str, str]:
        """Every file as text (relative path to content), sorted; undecodable bytes replaced."""
        out = {}
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
                out[path.relative_to(self.root).as_posix()] = path.read_bytes().decode("utf-8", "replace")
        return out

    def listing(self) -> list[str]:
        return list(self.files())

    def read(self, rel: str) -> str:
        path = self.path(rel)
        if not path.is_file():
            raise FileNotFoundError(f"{rel!r}: no such file")
        return path.read_bytes().decode("utf-8", "replace")

    def write(self, rel: str, text: str) -> None:
        """Replace (or create) a file: a new inode, so a hardlinked cache stays as it was."""
        path = self.path(rel, for_write=True)
        rel = path.relative_to(self.root).as_posix()
        current = self.files()
        size = sum(len(t.encode()) for p, t in current.items() if p != rel) + len(text.encode())
        if size > MAX_BYTES or (rel not in current and len(current) >= MAX_FILES):
            raise ValueError(f"the workspace may hold at most {MAX_FILES} files and {MAX_BYTES} bytes")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".whet-")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)

    def delete(self, rel: str) -> None:
        path = self.path(rel, for_write=True)
        if not path.is_file():
            raise FileNotFoundError(f"{rel!r}: no such file")
        path.unlink()

    def digest(self) -> str:
        return digest_of(self.files())

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


Prepare = Callable[[Workspace], Awaitable[dict]]


def _materialize(root: Path, files: dict[str, str]) -> None:
    if len(files) > MAX_FILES or sum(len(t.encode()) for t in files.values()) > MAX_BYTES:
        raise ValueError(f"task workspace over {MAX_FILES} files or {MAX_BYTES} bytes")
    root.mkdir(parents=True)
    scratch = Workspace(root)
    for rel, text in files.items():
        scratch.write(rel, text)


def _hardlink_copy(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, copy_function=os.link)


class WorkspaceCache:
    """Prepared workspaces by task digest, built once (files written, then `prepare` run),
    restored as hardlinked copies: the cached files are owned by this process's user and
    read-only, and tools replace a file (write a new one, rename over) instead of writing into
    it, so a restored workspace never changes the cache (copy on write)."""

    def __init__(self, root: Path | str | None = None, *, enabled: bool = True,
                 max_entries: int = 256) -> None:
        base = Path(root) if root else Path(tempfile.gettempdir())
        reap_stale(base)
        self.base = base / f"whet-ws-{os.getpid()}"
        self.base.mkdir(parents=True, exist_ok=True)
        self.enabled, self.max_entries = enabled, max_entries
        self.entries: dict[str, tuple[Path, dict]] = {}
        self.building: dict[str, anyio.Lock] = {}
        "One build per task at a time: concurrent attempts of a group wait, then restore."
        self.count = 0
        self.stats = {"builds": 0, "restores": 0, "build_s": 0.0, "restore_s": 0.0}

    async def checkout(self, files: dict[str, str], prepare: Prepare | None = None) -> Workspace:
        """A fresh workspace holding `files`, as preparation left it."""
        self.count += 1
        target = self.base / f"ws{self.count}"
        key = digest_of(files)
        started = time.perf_counter()
        if not self.enabled:
            return await self._build(key, target, files, prepare, started)
        async with self.building.setdefault(key, anyio.Lock()):
            if key not in self.entries:
                return await self._build(key, target, files, prepare, started)
            folder, prepared = self.entries[key]
            _hardlink_copy(folder, target)
            self.stats["restores"] += 1
            self.stats["restore_s"] += time.perf_counter() - started
            return Workspace(target, prepared=dict(prepared))

    async def _build(self, key: str, target: Path, files: dict[str, str], prepare: Prepare | None,
                     started: float) -> Workspace:
        _materialize(target, files)
        ws = Workspace(target)
        try:
            ws.prepared = await prepare(ws) if prepare else {}
        except BaseException:
            ws.remove()
            raise
        if self.enabled:
            self._keep(key, ws)
        self.stats["builds"] += 1
        self.stats["build_s"] += time.perf_counter() - started
        return ws

    def _keep(self, key: str, ws: Workspace) -> None:
        if len(self.entries) >= self.max_entries:
            old, (folder, _) = next(iter(self.entries.items()))
            shutil.rmtree(folder, ignore_errors=True)
            del self.entries[old]
            self.building.pop(old, None)
        folder = self.base / f"cache-{key[:16]}"
        _hardlink_copy(ws.root, folder)
        for path in folder.rglob("*"):
            if path.is_file():
                path.chmod(0o444)
        self.entries[key] = (folder, dict(ws.prepared))

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


def reap_stale(base: Path) -> int:
    """Remove workspace folders left by processes that are gone; how many."""
    removed = 0
    for folder in base.glob("whet-ws-*"):
        try:
            pid = int(folder.name.rsplit("-", 1)[1])
        except ValueError:
            continue
        if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed
