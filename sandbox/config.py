"""Configuration of where jobs run: the `[executor]` table and its `[executor.sandbox]`.

Consumes nothing; declares how many jobs an executor runs at once, how it hands a request
to another executor, and which sandbox backend runs jobs and how. Validated with the run
config (`runtime.config` composes it). Importable without aiodocker (the slim image has none).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bus.section import Section


class SandboxConfig(Section):
    """How jobs are isolated: `[executor.sandbox]` (and `[envs.gates.sandbox]` for intake)."""

    backend: Literal["subprocess", "local", "docker"] = "local"
    "Which backend runs jobs. 'subprocess' isolates nothing: a baseline, never for model output."
    workdir_root: str = ""
    "Where job directories are made; empty uses the system temp dir."
    envs_dir: str = ""
    "Folder of built environment trees (python -m sandbox.envbuild); empty: WHET_ENVS_DIR or /var/cache/whetstone/envs."
    uid_base: Annotated[int, msgspec.Meta(ge=1000, le=2**31 - 1024)] = 64000
    "Slot N runs as uid/gid uid_base+N: unprivileged, and never shared by two live jobs."
    prefork: bool = True
    "local: python-runtime jobs start in sandboxes pre-forked by a zygote (unshare, no bubblewrap per job)."
    warm_python: bool = True
    "local, with prefork: run `python3 ...` commands in-process in that sandbox (no interpreter start)."
    docker_host: str = ""
    "Docker API socket; empty: DOCKER_HOST, then the private engine's unix:///run/whetstone/docker.sock."
    docker_start_engine: bool = True
    "Start a private dockerd (no bridge, no iptables) when nothing answers at the socket."
    docker_runtime: Literal["runc", "runsc"] = "runc"
    "OCI runtime of job containers ('runsc' is gVisor; the engine must have it registered)."
    docker_warm_pool: Annotated[int, msgspec.Meta(ge=0, le=64)] = 0
    "Containers kept running per executor for `exec` jobs; 0 runs every job in a fresh container."


class ExecutorConfig(Section):
    """The executor actor's section, `[executor]`."""

    concurrency: Annotated[int, msgspec.Meta(ge=1, le=64)] = 4
    "Jobs run at once by one executor instance (its sandbox slots)."
    avoid_naks: Annotated[int, msgspec.Meta(ge=0, le=20)] = 3
    "Deliveries of a request that names this instance in avoid_executors before it runs here anyway."
    avoid_delay_s: Annotated[float, msgspec.Meta(ge=0, le=60)] = 0.5
    "Redelivery delay when giving such a request back."
    sandbox: SandboxConfig = SandboxConfig()
    "How jobs are isolated ([executor.sandbox])."
    session_idle_s: Annotated[float, msgspec.Meta(gt=0, le=86400)] = 600.0
    "A tool episode's workspace idle this long is closed (its judge is gone)."
    cache_workspaces: bool = True
    "Build a task's prepared workspace once and restore it for each attempt (hardlinked copy)."
