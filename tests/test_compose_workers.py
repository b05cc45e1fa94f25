"""Workers on another host, as compose users run them: a first project (NATS and setup
only, published beyond 127.0.0.1, TLS with client certificates) and a second project of
docker-compose.workers.yml and its TLS override (one executor, one judge) on its own
network, logged in with what `whet auth export-worker` copies, reaching the first only
through the published NATS port at this host's outside address (which the server
certificate names). The worker host takes work within seconds of `up`, leaves (`down`) with work in
flight, and the first host finishes the rest: every attempt gets exactly one verdict.

Same engine, images and skips as test_compose.py (the images are found by content hash).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from bench.compose import project as cs
from tests.conftest import until
from tests.support.compose_engine import engine_with_images
from tests.test_compose import _assert_once_and_passed

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]
WORKERS = ["executor", "judge"]


@pytest.fixture
def hosts(tmp_path):
    """The first host's project (NATS published on every address) and a worker host's;
    both taken down (volumes too) after the test."""
    built = engine_with_images(names=("nats", "slim"))  # no ml image: no generator here
    first = cs.Project.create(tmp_path / "secrets", tls=True)
    pinned = cs.pin_images(built.stdout, first.name, first.env)
    first.env.update(WHET_NATS_BIND="0.0.0.0", WHET_IMAGE_TAG=first.name)
    worker = first.worker_host(tmp_path / "worker-secrets")
    yield first, worker
    for project in (worker, first):
        subprocess.run(["docker", "compose", "down", "--volumes", "--timeout", "5"], cwd=cs.ROOT,
                       env=project.env, capture_output=True, timeout=120, check=False)
    subprocess.run(["docker", "rmi", *pinned], env=first.env, capture_output=True, timeout=60,
                   check=False)


async def test_a_worker_host_joins_takes_work_and_leaves_losing_nothing(hosts):
    """A worker host's executor and judge, on their own network, do the first host's work
    within seconds of `up`; after `down` with work in flight, the first host's own executor
    and judge finish it: every attempt judged once, and passed."""
    first, worker = hosts
    await first.compose("up", "-d", "nats", "setup", timeout_s=300)
    await first.wait_completed("setup", timeout_s=120)
    info = cs.server_info(cs.host_address(), first.nats_port)
    assert info["tls_required"] and info["tls_verify"], info  # the port workers dial
    # No admin (it cannot run setup or whet status), no CA key, no server files.
    assert sorted(os.listdir(worker.secrets)) == [*WORKERS, "tls"]
    assert sorted(os.listdir(worker.secrets / "tls")) == sorted(
        ["ca.pem", *(f"{r}{s}.pem" for r in WORKERS for s in ("", "-key"))])
    bus = await first.bus()
    try:
        await cs.publish(bus, cs.sleepy_attempts("w", 16, sleep_s=2.5))  # 20 s of work here
        up_at = time.time()
        await worker.compose("up", "-d", *WORKERS, timeout_s=300)
        there = await worker.containers()
        assert sorted(c["Config"]["Labels"]["com.docker.compose.service"] for c in there) == WORKERS
        assert cs.networks(there).isdisjoint(cs.networks(await first.containers()))
        assert not _resolves(there[0]["Id"], "nats", worker.env)  # no way in but the port
        remote = {_instance(c) for c in there}  # executor-<hostname>, judge-<hostname>
        found = await _wait_first_verdict(bus, remote, timeout_s=120)
        took_s = min(v.judged_at for v in found) - up_at
        began_s = min(v.judged_at - v.attempt.turns[-1].execution.wall_s for v in found) - up_at
        print(f"worker host: first job began {began_s:.1f} s, first verdict {took_s:.1f} s after up")
        assert took_s < 60, took_s
        status = first.whet("status", "--json")
        assert status.returncode == 0, status.stderr
        listed = {a["instance"] for a in json.loads(status.stdout)["actors"] if a["state"] == "ready"}
        assert remote <= listed, (remote, listed)
        await worker.compose("down", timeout_s=180)
        assert await worker.containers() == []
        left = 16 - len(await cs.verdicts(bus, "w"))
        assert left > 0  # so work was in flight or queued when the worker host left
        await first.compose("up", "-d", *WORKERS, timeout_s=300)
        local = {_instance(c) for c in await first.containers("executor")}
        done = await cs.wait_verdicts(bus, "w", 16, timeout_s=180)
    finally:
        await bus.close()
    _assert_once_and_passed(done, 16)
    ran_on = {vs[0].attempt.turns[-1].executor for vs in done.values()}
    assert ran_on <= remote | local and ran_on & remote and ran_on & local, (ran_on, remote, local)


async def _wait_first_verdict(bus, executors: set[str], timeout_s: float) -> list:
    """Verdicts of attempts run by `executors`, once there is at least one."""
    found: list = []

    async def judged() -> bool:
        found[:] = [vs[0] for vs in (await cs.verdicts(bus, "w")).values()
                    if vs[0].attempt.turns[-1].executor in executors]
        return bool(found)

    await until(judged, timeout_s, "the worker host judged nothing")
    return found


def _instance(container: dict) -> str:
    """The actor instance name a compose container runs as (`whet actor`'s default)."""
    return f"{container['Config']['Labels']['com.docker.compose.service']}-{container['Config']['Hostname']}"


def _resolves(container: str, name: str, env: dict[str, str]) -> bool:
    """Whether `name` resolves inside `container`."""
    code = f"import socket\nsocket.getaddrinfo({name!r}, 4222)"
    proc = subprocess.run(["docker", "exec", container, "python3", "-c", code], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode == 0
