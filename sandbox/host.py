"""The host programs the sandboxes need, and the Debian/Ubuntu packages that carry them.

Consumes PATH (plus the sbin folders, which a non-root PATH often lacks); produces
`HostTool` values, which of them are missing, and the one `apt-get` line that installs
them. `deploy.setup` (what `make run` and `make test` call) installs from these lists and
`runtime.stack.preflight` names them in its fixes, so the two never disagree.

Stdlib only: `deploy.setup` imports it with the system Python, before any venv exists.
It installs nothing and runs nothing.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

_SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")


@dataclass(frozen=True)
class HostTool:
    """One program on the host and the package it comes from."""

    command: str
    "Program name, looked up on PATH."
    package: str
    "Debian/Ubuntu package that installs it."
    purpose: str
    "What whetstone uses it for, said in a problem line."


BUBBLEWRAP = HostTool("bwrap", "bubblewrap", "the local sandbox backend")
LOCAL = (BUBBLEWRAP,)
"What the local backend runs on the host (bash and python3 come with every such machine)."
BUILD = (HostTool("debootstrap", "debootstrap", "building the sandbox environment trees"),)
"What builds the environment trees (`python -m sandbox.envbuild`); needed until they exist."
DOCKER = (HostTool("dockerd", "docker.io", "the private Docker engine of the docker backend"),
          HostTool("runc", "runc", "the docker backend's container runtime"))
"What the docker backend's private engine needs (unless another engine answers)."


def which(command: str) -> str | None:
    """Full path of `command` on PATH or in the sbin folders, or None."""
    folders = os.environ.get("PATH", os.defpath).split(os.pathsep)
    folders += [d for d in _SBIN if d not in folders]
    return shutil.which(command, path=os.pathsep.join(folders))


def missing(tools: tuple[HostTool, ...] | list[HostTool]) -> list[HostTool]:
    """The tools of `tools` not found on this host."""
    return [t for t in tools if which(t.command) is None]


def apt_install(packages: list[str], *, sudo: bool = False) -> str:
    """The exact command that installs `packages` (deduplicated, in order)."""
    unique = list(dict.fromkeys(packages))
    prefix = "sudo " if sudo else ""
    return f"{prefix}apt-get install -y --no-install-recommends {' '.join(unique)}"


def local_problems(host_python: str = "/usr/bin/python3") -> list[tuple[str, str]]:
    """What this host lacks to run the local backend, as (what, fix) pairs: bubblewrap on
    PATH, bash and the host python3 the zygote runs, and root (cgroups, per-slot uids)."""
    out = []
    sudo = os.geteuid() != 0
    for tool in missing(LOCAL):
        out.append((f"{tool.package} is not installed: {tool.purpose} runs {tool.command}, "
                    f"which is not on PATH", apt_install([tool.package], sudo=sudo)))
    for path, package in (("/bin/bash", "bash"), (host_python, "python3")):
        if not os.access(path, os.X_OK):
            out.append((f"{path} is missing: the local sandbox runs it",
                        apt_install([package], sudo=sudo)))
    if os.geteuid() != 0:
        out.append(("the local sandbox needs root (cgroups and per-slot uids)",
                    "run whet as root, or set backend = \"docker\""))
    return out
