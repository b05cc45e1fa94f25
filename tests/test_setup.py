"""`make run` and `make test` set the machine up themselves (deploy/setup.py), and CI runs
exactly `make test`.

The install itself (apt-get as root on a fresh machine) is exercised by CI's fresh machine;
here: what a ready machine does (nothing, at once), what a non-root user without a tool or
the trees is told (one line, the exact command), and how the Makefile orders the steps.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy import setup
from tests.conftest import ROOT

pytestmark = pytest.mark.unit

VENV_BIN = str(Path(sys.executable).parent)


def test_a_ready_machine_is_checked_in_well_under_a_second_with_the_system_python():
    """On this machine (tools, trees and plugin present) setup installs nothing, using only
    the system Python's standard library."""
    began = time.monotonic()
    for target in ("run", "test"):
        r = subprocess.run(["/usr/bin/python3", "-m", "deploy.setup", target,
                            "--venv", str(Path(sys.executable).parent.parent)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout == r.stderr == "", "nothing to install, nothing said"
    assert time.monotonic() - began < 5


def test_without_bubblewrap_a_non_root_user_gets_one_line_with_the_exact_command(
        monkeypatch, capsys, tmp_path):
    """bubblewrap off PATH, not root: exit 1 and one line naming the sudo apt-get command."""
    monkeypatch.setenv("PATH", VENV_BIN)
    code = setup.setup("run", Path(VENV_BIN).parent, root=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err == ["deploy.setup: `make run` needs bubblewrap (not installed), which takes root; run: "
                   "sudo apt-get install -y --no-install-recommends bubblewrap"]


def test_unbuilt_trees_add_debootstrap_and_the_tree_build_to_that_line(monkeypatch, capsys,
                                                                       tmp_path):
    """With no trees built and no debootstrap, the line installs it and builds the trees."""
    monkeypatch.setenv("PATH", VENV_BIN)
    monkeypatch.setattr(setup.host, "_SBIN", ())  # debootstrap lives in /usr/sbin
    assert setup.setup("run", Path(VENV_BIN).parent, str(tmp_path), root=False) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith("run: sudo apt-get install -y --no-install-recommends bubblewrap "
                         "debootstrap && sudo python3 -m sandbox.envbuild")


def test_the_makefile_sets_up_the_machine_before_the_venv_and_before_running():
    """`make run` and `make test` call deploy.setup first; run needs no images, test does."""
    def steps(target: str) -> list[str]:
        # Under `make test` this runs inside make: drop the parent's flags and level so
        # the child prints its recipe alone, without "Entering directory" lines.
        env = {k: v for k, v in os.environ.items()
               if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
        r = subprocess.run(["make", "--no-print-directory", "-n", "-W", "pyproject.toml",
                            target], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout.splitlines()

    run = steps("run")
    assert run[0] == "python3 -m deploy.setup run --venv .venv --trees-behind"
    assert run[-1].endswith("-m runtime.cli up --config configs/default.toml")
    assert not any("deploy.images" in s for s in run)
    test = steps("test")
    assert test[0] == "python3 -m deploy.setup test --venv .venv"
    assert test.index(".venv/bin/python -m deploy.images") < test.index(".venv/bin/pytest")


def test_ci_runs_exactly_make_test():
    """.ci/run sets CI=true and calls `make test`, installing nothing itself."""
    text = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in text.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert commands[-2:] == ["export CI=true", "make test"]
    for word in ("apt-get", "pip install", "dockerd", "debootstrap", "envbuild"):
        assert word not in text


HOLDER = """
import fcntl, sys
from pathlib import Path
from sandbox import envbuild, envs
base = Path(sys.argv[1])
with open(base / envbuild.BUILDING, "w") as held:
    fcntl.flock(held, fcntl.LOCK_EX)
    print("held", flush=True)
    sys.stdin.readline()
    for spec in envs.SPECS.values():
        envs.manifest(spec, str(base)).parent.mkdir(parents=True, exist_ok=True)
        envs.manifest(spec, str(base)).write_text("{}")
"""
"""A builder as `python -m sandbox.envbuild` holds its lock; it finishes every tree when told
(writing the manifests only: debootstrap itself needs root and minutes)."""


async def test_whet_up_waits_for_the_trees_a_builder_left_running_is_still_building(
        tmp_path, monkeypatch):
    """make run leaves the tree build running while the venv installs: the preflight finds
    the trees unbuilt but a builder at work, waits for it, then finds them all built."""
    import anyio

    from runtime.stack import preflight
    from sandbox import envbuild
    from tests.conftest import until

    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert envbuild.builder_running(str(tmp_path))
        waiting, found = [], []
        real_wait = envbuild.wait_for_builder

        def wait(root: str) -> bool:
            waiting.append(root)
            return real_wait(root)

        monkeypatch.setattr(envbuild, "wait_for_builder", wait)

        async def check() -> None:
            found.append(await preflight.unbuilt_trees(str(tmp_path)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(check)
            await until(lambda: waiting, 30, "the preflight waiting for the builder")
            assert found == []
            holder.stdin.write("done\n")
            holder.stdin.flush()
        assert found == [[]], "every tree built once the builder finished"
        assert not envbuild.builder_running(str(tmp_path))
    finally:
        holder.kill()
        holder.wait(timeout=30)


async def test_a_tree_build_left_running_that_fails_is_named_with_its_log(tmp_path,
                                                                         monkeypatch):
    """Without debootstrap the build behind fails; setup still returns, and the preflight
    names the unbuilt trees and the log that says why."""
    from runtime.stack import preflight
    from sandbox import envbuild
    from sandbox.config import SandboxConfig

    monkeypatch.setenv("PATH", VENV_BIN)  # no debootstrap
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    log = setup.build_behind(str(tmp_path), ["python"])
    envbuild.wait_for_builder(str(tmp_path))
    assert "apt-get install debootstrap" in log.read_text(), log.read_text()
    config = SandboxConfig(backend="local", envs_dir=str(tmp_path))
    problems = await preflight.sandbox_problems("executor.sandbox", config)
    (trees,) = [p for p in problems if "not built" in p.what]
    assert str(log) in trees.what and "sandbox.envbuild" in trees.fix
