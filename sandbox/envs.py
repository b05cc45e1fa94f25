"""Environment specs: the frozen, versioned root filesystems jobs run in.

Consumes nothing; declares each runtime a `Job.runtime` may name (`python`, `shell`) and
where its built root filesystem lives. `sandbox.envbuild` builds them (debootstrap, offline
afterwards); the local backend bind-mounts the built tree read-only as `/`, and the docker
backend imports the same tree as an image, so one spec runs the same bytes on both.

A spec is frozen by its `key` (name, version and a hash of everything that shapes the tree):
a change to the package list is a new key and a new tree; a built tree is never modified.
This module is stdlib-only so the CI build step can import it before any venv exists.
It does NOT build or run anything.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_ENVS_DIR = "/var/cache/whetstone/envs"
"Where built trees live unless `WHET_ENVS_DIR` or the sandbox config says otherwise."
SUITE = "bookworm"
"Debian release every spec is built from."

_SHELL_TOOLS = ("bash", "coreutils", "findutils", "grep", "sed", "gawk", "diffutils",
                "jq", "bc", "tar", "gzip", "bzip2", "xz-utils", "file", "procps")
_QUALITY_TOOLS = ("flake8", "mypy")
"The judge's quality measurements (lint and type errors) run these inside the sandbox."
MYPY_CACHE = "/var/cache/whet-mypy"
"mypy's cache of the standard library's stubs, built with the tree and read-only in jobs."
MYPY_FLAGS = ("--no-error-summary", "--show-error-codes", "--check-untyped-defs",
              "--ignore-missing-imports", "--follow-imports=skip", "--config-file=",
              "--disable-error-code=var-annotated", "--disable-error-code=no-redef")
"""The flags of the judge's type check (judging/harness/measure.py must use the same: the cache
is only valid for the options it was built with). Pre-building the cache takes a job's mypy
from about 0.9 s to about 0.4 s."""


@dataclass(frozen=True)
class EnvSpec:
    """One runtime: a Debian minbase tree plus packages, and what a job there gets."""

    name: str
    "Name a `Job.runtime` uses."
    version: str
    "Bumped by hand when the meaning changes; part of the key."
    packages: tuple[str, ...]
    "Debian packages added to minbase."
    path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    "PATH inside the sandbox."
    env: dict[str, str] = field(default_factory=dict)
    "Extra environment variables of every job."
    prepare: tuple[tuple[str, ...], ...] = ()
    "Commands run once in the finished tree (chroot, as root) before it is frozen."

    @property
    def key(self) -> str:
        """Stable identity of the built tree: '<name>-<version>-<hash of the spec>'."""
        shape = json.dumps([SUITE, self.packages] + ([self.prepare] if self.prepare else []),
                           sort_keys=True).encode()
        return f"{self.name}-{self.version}-{hashlib.sha256(shape).hexdigest()[:10]}"

    @property
    def image(self) -> str:
        """Docker image reference the same tree is imported as."""
        return f"whet-env/{self.name}:{self.version}-{self.key.rsplit('-', 1)[1]}"


SPECS: dict[str, EnvSpec] = {
    "python": EnvSpec(
        name="python", version="2",
        packages=("python3", "python3-pytest", "python3-numpy") + _QUALITY_TOOLS + _SHELL_TOOLS,
        prepare=(("mypy", *MYPY_FLAGS, f"--cache-dir={MYPY_CACHE}", "-c", "x = 1"),),
        env={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}),
    "shell": EnvSpec(name="shell", version="1", packages=_SHELL_TOOLS),
}
"Every runtime a job may name."


def spec(name: str) -> EnvSpec:
    """The spec called `name`, or a ValueError naming the known ones."""
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(f"unknown runtime {name!r}; expected one of {sorted(SPECS)}") from None


def envs_dir(configured: str = "") -> Path:
    """The folder holding built trees: config, then WHET_ENVS_DIR, then the default."""
    return Path(configured or os.environ.get("WHET_ENVS_DIR") or DEFAULT_ENVS_DIR)


def rootfs(env: EnvSpec, configured: str = "") -> Path:
    """Where the built tree of `env` lives (it exists once `manifest` does)."""
    return envs_dir(configured) / env.key / "rootfs"


def manifest(env: EnvSpec, configured: str = "") -> Path:
    """The file written last by a successful build: package versions and tree hash."""
    return envs_dir(configured) / env.key / "manifest.json"


def tarball(env: EnvSpec, configured: str = "") -> Path:
    """The tree packed for `docker import`."""
    return envs_dir(configured) / env.key / "rootfs.tar"


def is_built(env: EnvSpec, configured: str = "") -> bool:
    """True when the tree of `env` was built completely."""
    return manifest(env, configured).is_file()


def unbuilt(configured: str = "") -> list[EnvSpec]:
    """The specs whose tree is not built completely in the envs folder `configured`."""
    return [spec for spec in SPECS.values() if not is_built(spec, configured)]
