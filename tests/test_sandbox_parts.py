"""The sandbox's parts on their own: status rules, file names, env specs, cgroup slots
(on whichever cgroup layout this host has), the `whet exec` command, the container reaper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bus.messages import Job, Limits
from sandbox import envs
from sandbox.launch import Slot, bwrap_args, job_env, spawn_request
from sandbox.outcome import Observed, safe_relative, split_shell_code, status_of
from tests.support.sandbox_fixtures import built_envs, docker_engine  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.unit
def test_status_rules():
    """OOM wins over everything; then our deadline, the output cap, signals, exit codes."""
    job = Job(command=["x"], limits=Limits(cpu_s=2))
    assert status_of(Observed(oom=True, timed_out=True, signal=9), job) == "oom"
    assert status_of(Observed(timed_out=True, signal=9), job) == "timeout"
    assert status_of(Observed(output_limited=True, signal=9), job) == "output_limit"
    assert status_of(Observed(signal=9, cpu_s=1.99), job) == "timeout"  # RLIMIT_CPU
    assert status_of(Observed(signal=9, cpu_s=0.1), job) == "killed"
    assert status_of(Observed(exit_code=0), job) == "ok"
    assert status_of(Observed(exit_code=2), job) == "nonzero_exit"
    assert split_shell_code(137) == (None, 9) and split_shell_code(1) == (1, None)


@pytest.mark.unit
def test_job_file_names_must_stay_inside():
    """Absolute paths and '..' are refused; nested relative names are fine."""
    assert safe_relative("a.py") and safe_relative("tests/test_a.py")
    for bad in ("/etc/passwd", "../x", "a/../../x", "", "a//b", "./a"):
        assert not safe_relative(bad), bad


@pytest.mark.unit
def test_env_specs_are_versioned_and_distinct():
    """Each runtime's key names its version and a hash of its package list."""
    python, shell = envs.spec("python"), envs.spec("shell")
    assert python.key.startswith("python-2-") and shell.key.startswith("shell-1-")
    assert python.key != shell.key and "python3" in python.packages
    assert python.image.startswith("whet-env/python:2-")
    with pytest.raises(ValueError, match="unknown runtime"):
        envs.spec("cobol")


@pytest.mark.unit
def test_spawn_request_drops_privileges_and_sandboxes():
    """The spawner drops to the slot uid, then runs bubblewrap with every namespace, the tree
    read-only, /work read-only, capped tmpfs, a clean environment."""
    limits = Limits(disk_mb=16, cpu_s=2.5, nofile=100)
    env = job_env(envs.spec("python"))
    bwrap = bwrap_args("/roots/py", "/jobs/slot3", limits, env, status_fd=4)
    request = spawn_request(Slot(3, 64003, ()), limits, bwrap, ["python3", "x.py"])
    assert request["uid"] == 64003 and request["argv"][0] == "/usr/bin/bwrap"
    joined = " ".join(request["argv"])
    for part in ("--unshare-all", "--die-with-parent", "--ro-bind /roots/py /",
                 "--ro-bind /jobs/slot3 /work", "--chdir /work", "--clearenv",
                 f"--size {16 * 2**20} --tmpfs /tmp", "--json-status-fd 4", "-- python3 x.py"):
        assert part in joined, part
    assert request["rlimits"] == {"RLIMIT_CPU": 3, "RLIMIT_FSIZE": 16 * 2**20,
                                  "RLIMIT_NOFILE": 100, "RLIMIT_CORE": 0}
    assert env["HOME"] == env["TMPDIR"] == "/tmp" and env["WHET_REPORT_FD"] == "3"


@pytest.mark.bus
def test_cgroup_slot_limits_accounts_and_kills():
    """On this host's layout (v1 or v2, as detected): a process born in a slot is limited
    (OOM), counted (CPU seconds), and killed with its whole tree; residents are spared."""
    proc = subprocess.run(["/usr/bin/python3", "-m", "sandbox.cgroupcheck"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "all checks passed" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.startswith("layout: cgroup v")


@pytest.mark.bus
def test_whet_exec_prints_the_result_as_json(built_envs, tmp_path):
    """`whet exec` runs one command in a fresh sandbox and prints the ExecutionResult."""
    (tmp_path / "in.txt").write_text("payload")
    proc = subprocess.run([sys.executable, "-m", "runtime.cli", "exec", "--files", str(tmp_path),
                           "--timeout", "5", "--", "python3", "-c",
                           "import os; print(open('in.txt').read(), os.getuid() >= 64000)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["status"], result["stdout"], result["backend"]) == ("ok", "payload True\n", "local")
    bad = subprocess.run([sys.executable, "-m", "runtime.cli", "exec", "--backend", "vm", "--", "true"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert bad.returncode == 2 and "--backend 'vm'" in bad.stderr


@pytest.mark.bus
async def test_reaper_removes_leftover_containers(docker_engine):
    """Containers a dead executor left behind (same run label) are removed at the next open."""
    from sandbox import engine, open_backend
    from sandbox.config import SandboxConfig

    run_id = f"reap-{os.getpid()}"
    docker = await engine.connect()
    try:
        image = await engine.ensure_image(docker, envs.spec("shell"))
        left = await docker.containers.create({"Image": image, "Cmd": ["sleep", "60"],
                                               "Labels": {engine.LABEL_RUN: run_id}})
        await left.start()
        backend = await open_backend(SandboxConfig(backend="docker"), slots=1, run_id=run_id)
        await backend.aclose()
        found = await docker.containers.list(all=True, filters={"label": [f"{engine.LABEL_RUN}={run_id}"]})
        assert found == []
    finally:
        await docker.close()


@pytest.mark.bus
async def test_oci_runtime_comes_from_config(docker_engine):
    """docker_runtime is passed to the engine: one it does not have is a sandbox failure
    that names it, never a job failure."""
    from sandbox import open_backend
    from sandbox.config import SandboxConfig

    backend = await open_backend(SandboxConfig(backend="docker", docker_runtime="runsc"), slots=1,
                                 run_id=f"runsc-{os.getpid()}")
    try:
        result = await backend.run(Job(command=["true"], runtime="shell"))
    finally:
        await backend.aclose()
    assert (result.status, result.sandbox_failed) == ("sandbox_error", True), result
    assert "runsc" in result.sandbox_error
