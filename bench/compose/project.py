"""A compose project driven from Python, for the compose benches here and the compose tests.

Consumes docker-compose.yml, a Docker-API engine (`sandbox.engine`: DOCKER_HOST or the
private dockerd) and the images `deploy.images` builds; produces a project with its own
name, secrets folder (role passwords and the NATS users block) and free host ports, on
the overrides asked for (TLS, the three-node cluster, both), runs `docker compose ...`
commands the way a user types them, reads container health and a server's INFO, makes a
second project of workers only (docker-compose.workers.yml) that joins the first through
its published NATS port, and builds the attempts the test and bench inject (a `python_io`
task whose program sleeps, so executor capacity is what limits throughput).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiodocker
import anyio

from bench.judge.tasks import attempt, io_task
from bus import subjects
from bus.messages import Attempt, Heartbeat, Verdict
from bus.nats_bus import Bus, BusSettings, local_identity
from runtime.broker import auth, certs
from runtime.stack import credentials
from sandbox import engine

ROOT = Path(__file__).resolve().parents[2]
ENGINE_UP = "import anyio\nfrom sandbox import engine\nanyio.run(engine.connect)\n"


def start_engine() -> str:
    """Start the engine if needed (a subprocess: dockerd outlives it); '' or the error."""
    proc = subprocess.run([sys.executable, "-c", ENGINE_UP], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return "" if proc.returncode == 0 else proc.stderr[-2000:]


def compose_missing() -> str:
    """'' when `docker compose` works here, else what is missing."""
    if shutil.which("docker") is None:
        return "no docker CLI (apt-get install docker.io)"
    proc = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        return f"`docker compose` does not work: {proc.stderr.strip()[-300:]} (make test installs it: deploy/setup.py)"
    return ""


def build_images(timeout_s: float = 1800.0, names: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`python -m deploy.images [NAMES]`: the images (default: all), built offline or found
    by content hash."""
    return subprocess.run([sys.executable, "-m", "deploy.images", *names], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def bench_images(names: tuple[str, ...] = ()) -> subprocess.CompletedProcess | str:
    """What a compose bench needs before it starts: the engine, `docker compose` and the images
    (`build_images(names)`); the finished build, or the line saying what is missing."""
    for problem in (start_engine(), compose_missing()):
        if problem:
            return problem
    built = build_images(names=names)
    return built if built.returncode == 0 else built.stdout + built.stderr


def pin_images(build_output: str, tag: str, env: dict[str, str]) -> list[str]:
    """Tag the images `build_images` reported with `tag` as well, for WHET_IMAGE_TAG: a
    project then runs these builds even when another checkout on the same engine moves
    `:latest` to its own. The refs made (remove them with `docker rmi`)."""
    made = []
    for line in build_output.splitlines():
        if line.startswith("image "):
            ref = line.split()[1]
            pinned = f"{ref.rsplit(':', 1)[0]}:{tag}"
            subprocess.run(["docker", "tag", ref, pinned], env=env, check=True, timeout=60)
            made.append(pinned)
    return made


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Project:
    name: str
    env: dict[str, str]
    secrets: Path
    nats_port: int
    images: dict[str, str] = field(default_factory=dict)
    "Image refs the project runs, and how `deploy.images` made them."
    tls: bool = False
    "NATS requires TLS and client certificates (docker-compose.tls.yml)."

    @classmethod
    def create(cls, folder: Path, tls: bool = False, cluster: bool = False) -> "Project":
        """A fresh project name, password files and NATS users block, free host ports; with
        `tls`, certificates (the server's also for this host's outside address) and the
        TLS override; with `cluster`, the three-node override (and its TLS one with `tls`:
        the server's certificate then also names the other nodes)."""
        folder.mkdir(parents=True, exist_ok=True)
        passwords = credentials.ensure_passwords(folder)
        text = auth.server_config(auth.AuthConfig(), passwords)
        if tls:
            hosts = [*(CLUSTER_NODES if cluster else ()), host_address()]
            certs.ensure(credentials.tls_dir(folder), hosts)
            text += credentials.server_tls_block(Path("/etc/nats/tls"))
        fd = os.open(folder / "nats-auth.conf", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        port = free_port()
        name = f"whettest{secrets.token_hex(3)}"
        env = {**os.environ, "DOCKER_HOST": engine.engine_url(), "COMPOSE_PROJECT_NAME": name,
               "WHET_SECRETS_DIR": str(folder), "WHET_NATS_PORT": str(port),
               "WHET_METRICS_PORT": str(free_port())}
        if cluster:
            env.update(WHET_NATS_PORT_2=str(free_port()), WHET_NATS_PORT_3=str(free_port()))
        env["COMPOSE_FILE"] = ":".join(compose_files(tls, cluster))
        return cls(name, env, folder, port, tls=tls)

    def admin_tls(self) -> dict[str, str]:
        """The CA, certificate and key admin presents (none without TLS)."""
        return credentials.role_tls(self.secrets, auth.ADMIN) if self.tls else {}

    async def compose(self, *args: str, timeout_s: float = 300.0, check: bool = True) -> str:
        """Run `docker compose ARGS` in the repository; its output (stderr included)."""
        with anyio.fail_after(timeout_s):
            proc = await anyio.run_process(["docker", "compose", *args], cwd=ROOT, env=self.env,
                                           check=False, stderr=subprocess.STDOUT)
        out = proc.stdout.decode(errors="replace")
        if check and proc.returncode != 0:
            command = " ".join(args)
            raise AssertionError(f"docker compose {command} exited {proc.returncode}:\n{out[-3000:]}")
        return out

    async def containers(self, service: str = "") -> list[dict]:
        """Inspect data of this project's containers (of one service, if named)."""
        labels = [f"com.docker.compose.project={self.name}"]
        if service:
            labels.append(f"com.docker.compose.service={service}")
        async with aiodocker.Docker(url=self.env["DOCKER_HOST"]) as docker:
            found = await docker.containers.list(all=True, filters={"label": labels})
            return [await c.show() for c in found]

    async def wait_healthy(self, services: list[str], timeout_s: float) -> float:
        """Wait until every named service has a running, healthy container; seconds taken."""
        started = time.monotonic()
        with anyio.fail_after(timeout_s):
            while True:
                states = {s: [_health(c) for c in await self.containers(s)] for s in services}
                if all(v and all(h == "healthy" for h in v) for v in states.values()):
                    return time.monotonic() - started
                await anyio.sleep(1.0)

    async def wait_completed(self, service: str, timeout_s: float) -> None:
        """Wait until the one-shot `service` (setup) has exited 0; its logs if it failed."""
        with anyio.fail_after(timeout_s):
            while True:
                states = [c["State"] for c in await self.containers(service)]
                if states and all(s["Status"] == "exited" for s in states):
                    logs = await self.compose("logs", "--no-color", service, check=False)
                    assert all(s["ExitCode"] == 0 for s in states), logs[-3000:]
                    return
                await anyio.sleep(0.5)

    async def bus(self) -> Bus:
        """A bus client logged in as admin through the published NATS port."""
        files = self.admin_tls()
        settings = BusSettings(url=f"nats://127.0.0.1:{self.nats_port}", user=auth.ADMIN,
                               password=(self.secrets / auth.ADMIN).read_text().strip(),
                               tls_ca_file=files.get("WHET_NATS_CA", ""),
                               tls_cert_file=files.get("WHET_NATS_CERT", ""),
                               tls_key_file=files.get("WHET_NATS_KEY", ""),
                               connect_timeout_s=10.0, request_timeout_s=5.0,
                               publish_deadline_s=60.0)
        return await Bus.connect(settings, local_identity("test"))

    def worker_host(self, folder: Path, roles: str = "executor,judge") -> "Project":
        """A second project of docker-compose.workers.yml (its own name and network) that
        reaches this one's NATS only at this host's outside address, logged in with what
        `whet auth export-worker` copies to `folder`. This project must publish NATS beyond
        127.0.0.1 (WHET_NATS_BIND)."""
        out = self.whet("auth", "export-worker", str(self.secrets), str(folder), "--roles", roles)
        assert out.returncode == 0, out.stderr
        name = f"{self.name}w{secrets.token_hex(2)}"
        files = [WORKERS_FILE, WORKERS_TLS_FILE] if self.tls else [WORKERS_FILE]
        env = {**self.env, "COMPOSE_PROJECT_NAME": name, "COMPOSE_FILE": ":".join(files),
               "WHET_SECRETS_DIR": str(folder),
               "WHET_NATS_URL": f"nats://{host_address()}:{self.nats_port}"}
        return Project(name, env, folder, self.nats_port, tls=self.tls)

    def whet(self, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
        """`whet ARGS` on the host against the stack, logged in as admin from the secrets."""
        env = {**os.environ, "PYTHONPATH": str(ROOT), "WHET_NATS_USER": auth.ADMIN,
               "WHET_NATS_PASSWORD_FILE": str(self.secrets / auth.ADMIN),
               "WHET_NATS_URL": f"nats://127.0.0.1:{self.nats_port}", **self.admin_tls()}
        return subprocess.run([sys.executable, "-m", "runtime.cli", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout_s)


WORKERS_FILE = "docker-compose.workers.yml"
WORKERS_TLS_FILE = "docker-compose.workers.tls.yml"
CLUSTER_NODES = ("nats-2", "nats-3")
"The cluster override's nodes beside `nats`: names clients and routes dial them by."


def compose_files(tls: bool, cluster: bool) -> list[str]:
    """The compose files of a stack, in the order they override each other."""
    files = ["docker-compose.yml"]
    files += ["docker-compose.cluster.yml"] if cluster else []
    files += ["docker-compose.tls.yml"] if tls else []
    files += ["docker-compose.cluster.tls.yml"] if tls and cluster else []
    return files


def server_info(host: str, port: int) -> dict:
    """The INFO a NATS server sends first on a new connection."""
    with socket.create_connection((host, port), timeout=10) as s:
        line = s.makefile("rb").readline()
    if not line.startswith(b"INFO "):
        raise ValueError(f"{host}:{port} sent {line[:200]!r}, not a NATS INFO line")
    return json.loads(line[5:])


def host_address() -> str:
    """This host's address on its default route (what another host would dial); no packet
    is sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("198.51.100.1", 9))  # TEST-NET-2: any routed address
        return s.getsockname()[0]


def networks(containers: list[dict]) -> set[str]:
    """Names of the networks `containers` are attached to."""
    return {n for c in containers for n in c["NetworkSettings"]["Networks"]}


def _health(container: dict) -> str:
    state = container["State"]
    return state.get("Health", {}).get("Status", "") if state.get("Running") else "stopped"


SLEEPY = io_task([([1], 2)], [([2], 3), ([5], 6)], "def f(x):\n    return x + 1\n", timeout_s=20)
"A task whose every attempt below is one sandbox job of about `sleep_s` seconds."


def sleepy_attempts(prefix: str, count: int, sleep_s: float = 1.5) -> list[Attempt]:
    """Correct eval attempts that sleep first: eval, so the learner never trains on them."""
    code = f"import time\ntime.sleep({sleep_s})\n\ndef f(x):\n    return x + 1\n"
    return [attempt(SLEEPY, code, purpose="eval", attempt_id=f"{prefix}{i}.0") for i in range(count)]


async def publish(bus: Bus, attempts: list[Attempt]) -> None:
    for a in attempts:
        await bus.publish(subjects.ATTEMPTS, a, msg_id=a.attempt_id)


async def verdicts(bus: Bus, prefix: str) -> dict[str, list[Verdict]]:
    """Every stored verdict of attempts whose id starts with `prefix`, by attempt id."""
    found: dict[str, list[Verdict]] = {}
    async for _, v, _ in bus.replay(subjects.STREAM_VERDICTS, f"{subjects.VERDICTS}.>", Verdict,
                                    follow=False):
        if v is not None and v.attempt.attempt_id.startswith(prefix):
            found.setdefault(v.attempt.attempt_id, []).append(v)
    return found


async def wait_verdicts(bus: Bus, prefix: str, count: int, timeout_s: float) -> dict[str, list[Verdict]]:
    """Poll until `count` attempts of `prefix` have verdicts (or time out)."""
    with anyio.fail_after(timeout_s):
        while len(found := await verdicts(bus, prefix)) < count:
            await anyio.sleep(1.0)
    return found


async def executor_beats(bus: Bus) -> dict[str, Heartbeat]:
    """Heartbeats of every executor instance ever seen in this run, by instance."""
    beats = await bus.kv_items(subjects.BUCKET_ACTORS, Heartbeat, prefix="executor.")
    return {b.instance: b for b in beats.values()}
