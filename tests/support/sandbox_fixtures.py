"""Fixtures for sandbox tests: built environment trees, a real Docker-API engine, backends.

The environment trees are built once per machine (`python -m sandbox.envbuild`; `make test`
does it before the tests, through deploy/setup.py). The docker engine is the private dockerd that `sandbox.engine`
starts when nothing answers; a test skips only if that engine truly cannot start here, and
says why. Import the fixtures into a test module with `from tests.support.sandbox_fixtures import *`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from sandbox import envbuild, envs, open_backend
from sandbox.config import SandboxConfig

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = {
    "local-bwrap": SandboxConfig(backend="local", prefork=False, warm_python=False),
    "local": SandboxConfig(backend="local", warm_python=False),
    "warm": SandboxConfig(backend="local", warm_python=True),
    "docker": SandboxConfig(backend="docker", docker_warm_pool=0),
    "docker-warm": SandboxConfig(backend="docker", docker_warm_pool=2),
}
"""Every isolating path: bubblewrap per job, a pre-forked sandbox with a fresh exec, the
command in-process in it (warm), a container per job, the docker warm pool."""


@pytest.fixture(scope="session")
def built_envs() -> None:
    """The python and shell environment trees (built now if this machine lacks them)."""
    for spec in envs.SPECS.values():
        if not envs.is_built(spec):
            envbuild.build(spec)


_ENGINE_UP = """
import anyio
from sandbox import engine, envs

async def main():
    was_up = await engine.answers(engine.engine_url())
    docker = await engine.connect()
    for spec in envs.SPECS.values():
        await engine.ensure_image(docker, spec)
    await docker.close()
    print("already running" if was_up else "started")

anyio.run(main)
"""


@pytest.fixture(scope="session")
def docker_engine(built_envs):
    """URL of a running Docker-API engine with the environment images imported. An engine
    these tests started is stopped after them; one that was running is left alone."""
    from sandbox import engine

    proc = subprocess.run([sys.executable, "-c", _ENGINE_UP], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        error = proc.stderr[-2000:]
        if os.environ.get("CI"):
            pytest.fail(f"the Docker engine must start in CI:\n{error}")
        pytest.skip(f"no Docker engine can start on this machine:\n{error}")
    yield engine.engine_url()
    if proc.stdout.strip().endswith("started"):
        engine.stop_private_dockerd()


@pytest.fixture(params=list(BACKENDS))
async def backend(request, built_envs):
    """An open backend of each isolating kind, closed after the test."""
    if request.param.startswith("docker"):
        request.getfixturevalue("docker_engine")
    opened = await open_backend(BACKENDS[request.param], slots=2, run_id=f"test-{os.getpid()}")
    try:
        yield opened
    finally:
        with anyio.CancelScope(shield=True):
            await opened.aclose()
