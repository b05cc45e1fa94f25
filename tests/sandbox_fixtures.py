"""Fixtures for sandbox tests: built environment trees, a real Docker-API engine, backends.

The environment trees are built once per machine (`python -m sandbox.envbuild`; `.ci/run`
does it before the tests). The docker engine is the private dockerd that `sandbox.engine`
starts when nothing answers; a test skips only if that engine truly cannot start here, and
says why. Import the fixtures into a test module with `from tests.sandbox_fixtures import *`.
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

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = {
    "local": SandboxConfig(backend="local", warm_python=False),
    "warm": SandboxConfig(backend="local", warm_python=True),
    "docker": SandboxConfig(backend="docker", docker_warm_pool=0),
    "docker-warm": SandboxConfig(backend="docker", docker_warm_pool=2),
}
"Every isolating path: local cold, local warm (zygote), docker cold, docker warm pool."


@pytest.fixture(scope="session")
def built_envs() -> None:
    """The python and shell environment trees (built now if this machine lacks them)."""
    for spec in envs.SPECS.values():
        if not envs.is_built(spec):
            envbuild.build(spec)


_engine_state: dict[str, str] = {}


@pytest.fixture(scope="session")
def docker_engine(built_envs) -> str:
    """URL of a running Docker-API engine with the environment images imported."""
    if "url" not in _engine_state and "error" not in _engine_state:
        script = ("import anyio\nfrom sandbox import engine, envs\n"
                  "async def main():\n    d = await engine.connect()\n"
                  "    for s in envs.SPECS.values(): await engine.ensure_image(d, s)\n"
                  "    await d.close()\nanyio.run(main)\n")
        proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                              text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if proc.returncode == 0:
            from sandbox.engine import engine_url

            _engine_state["url"] = engine_url()
        else:
            _engine_state["error"] = proc.stderr[-2000:]
    if "error" in _engine_state:
        if os.environ.get("CI"):
            pytest.fail(f"the Docker engine must start in CI:\n{_engine_state['error']}")
        pytest.skip(f"no Docker engine can start on this machine:\n{_engine_state['error']}")
    return _engine_state["url"]


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
