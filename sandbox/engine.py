"""The Docker-API engine the docker backend talks to, and the environment images in it.

Consumes a socket URL and the built environment trees; produces a connected
`aiodocker.Docker`, starting a private dockerd when none answers at the default socket
(no bridge, no iptables, its own data and exec roots, so it touches no host networking and
survives the process that started it), and imports a missing environment image from the
tree's `rootfs.tar` (no registry needed). Also the reaper: removes containers labelled with
a run id, and leftover ones of any run older than a cut-off.

Imports aiodocker: only the docker backend, its tests and the bench import this module.
It does NOT run jobs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import aiodocker
import anyio
import structlog

from bus.errors import SandboxUnavailable
from sandbox import envs

log = structlog.get_logger("sandbox.engine")
PRIVATE_SOCKET = "/run/whetstone/docker.sock"
PRIVATE_DATA = "/var/lib/whetstone/docker"
PRIVATE_EXEC = "/run/whetstone/docker-exec"
LABEL_RUN = "whetstone.run"
LABEL_SLOT = "whetstone.slot"
START_TIMEOUT_S = 60.0


def engine_url(configured: str = "") -> str:
    """The socket to use: config, then DOCKER_HOST, then the private engine's."""
    return configured or os.environ.get("DOCKER_HOST") or f"unix://{PRIVATE_SOCKET}"


async def answers(url: str, timeout_s: float = 3.0) -> bool:
    """True when a Docker API answers at `url`."""
    try:
        with anyio.fail_after(timeout_s):
            async with aiodocker.Docker(url=url) as docker:
                await docker.version()
        return True
    except (aiodocker.DockerError, OSError, TimeoutError, ValueError):
        return False
    except Exception as exc:  # noqa: BLE001 - aiohttp raises its own connection errors
        log.debug("sandbox.engine_probe_failed", error=repr(exc))
        return False


def start_private_dockerd() -> subprocess.Popen:
    """Start dockerd on the private socket, detached (it outlives this process)."""
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    if not os.access(dockerd, os.X_OK):
        raise SandboxUnavailable("no dockerd: apt-get install docker.io (or set docker_host)")
    for folder in (Path(PRIVATE_SOCKET).parent, Path(PRIVATE_DATA), Path(PRIVATE_EXEC)):
        folder.mkdir(parents=True, exist_ok=True)
    logfile = open(Path(PRIVATE_DATA).parent / "dockerd.log", "ab")
    argv = [dockerd, "--bridge=none", "--iptables=false", "--ip-masq=false",
            f"--data-root={PRIVATE_DATA}", f"--exec-root={PRIVATE_EXEC}",
            f"--pidfile={Path(PRIVATE_SOCKET).parent / 'dockerd.pid'}",
            f"--host=unix://{PRIVATE_SOCKET}", "--log-level=warn"]
    log.info("sandbox.engine_starting", argv=" ".join(argv))
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logfile, stderr=logfile,
                            start_new_session=True)


def stop_private_dockerd(timeout_s: float = 30.0) -> bool:
    """Stop the private dockerd (SIGTERM through its pidfile); True once it is gone."""
    pidfile = Path(PRIVATE_SOCKET).parent / "dockerd.pid"
    try:
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.1)
    return False


async def connect(configured: str = "", start: bool = True) -> aiodocker.Docker:
    """A connected client; starts the private dockerd first if allowed and needed."""
    url = engine_url(configured)
    if not await answers(url):
        if not (start and url == f"unix://{PRIVATE_SOCKET}"):
            raise RuntimeError(f"no Docker API answers at {url}")
        proc = start_private_dockerd()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not await answers(url, timeout_s=2.0):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (Path(PRIVATE_DATA).parent / "dockerd.log").read_text()[-1500:]
                raise RuntimeError(f"dockerd did not come up at {url}:\n{tail}")
            await anyio.sleep(0.2)
        log.info("sandbox.engine_started", url=url, pid=proc.pid)
    return aiodocker.Docker(url=url)


async def ensure_image(docker: aiodocker.Docker, env: envs.EnvSpec, configured_dir: str = "") -> str:
    """Make sure `env.image` exists in the engine, importing the built tree if it does not."""
    try:
        await docker.images.inspect(env.image)
        return env.image
    except aiodocker.DockerError as exc:
        if exc.status != 404:
            raise
    tar = envs.tarball(env, configured_dir)
    if not envs.is_built(env, configured_dir):
        raise SandboxUnavailable(f"runtime {env.key} is not built; run `python -m sandbox.envbuild`")
    repo, tag = env.image.rsplit(":", 1)
    started = time.monotonic()
    with open(tar, "rb") as body:
        async with docker._query("images/create", method="POST",
                                 params={"fromSrc": "-", "repo": repo, "tag": tag},
                                 data=body, headers={"Content-Type": "application/x-tar"},
                                 timeout=600) as response:
            await response.read()
    await docker.images.inspect(env.image)
    log.info("sandbox.image_imported", image=env.image, seconds=round(time.monotonic() - started, 1))
    return env.image


async def reap(docker: aiodocker.Docker, run_id: str | None = None) -> int:
    """Force-remove whetstone containers: those of `run_id`, or all of them when None."""
    label = f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN
    found = await docker.containers.list(all=True, filters={"label": [label]})
    for container in found:
        try:
            await container.delete(force=True)
        except aiodocker.DockerError as exc:
            if exc.status != 404:
                log.warning("sandbox.reap_failed", container=container.id[:12], error=str(exc))
    if found:
        log.info("sandbox.containers_reaped", count=len(found), run_id=run_id or "*")
    return len(found)
