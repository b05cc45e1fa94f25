"""The Docker-API engine and the compose images, for the tests that bring up compose stacks.

Consumes the machine's engine (`bench.compose.project.start_engine`) and the repository's
sources; produces a running engine, the `docker compose` plugin checked and the images
built (a lookup when cached by content hash). Without an engine it skips, except under CI,
where it fails: a missing service is a failure there.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from bench.compose import project as cs


def engine_with_images(names: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Start the engine and build the images `names` (all when empty); the build's output."""
    error = cs.start_engine()
    if error:
        if os.environ.get("CI"):
            pytest.fail(f"the Docker engine must start in CI:\n{error}")
        pytest.skip(f"no Docker engine can start on this machine:\n{error}")
    missing = cs.compose_missing()
    assert not missing, missing
    built = cs.build_images(names=names)
    assert built.returncode == 0, built.stdout + built.stderr
    return built
