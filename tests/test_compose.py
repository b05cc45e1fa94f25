"""The compose stack on a real Docker-API engine: images built offline, the whole stack up,
executors scaled 1 -> 3 -> 1 while work flows, `whet status` and `whet tail` from the host,
then `down`, with nothing lost.

The engine is the private dockerd of `sandbox.engine` (or DOCKER_HOST); `make test` installs
docker.io, docker-compose and the `docker compose` plugin (deploy/setup.py), and builds the
images first (they
are cached by content hash, so the build here is a lookup). The test skips only when the
engine truly cannot start on this machine, and fails instead under CI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from bench.compose import project as cs
from tests.conftest import until
from tests.support.compose_engine import engine_with_images

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]
SERVICES = ["nats", "sampler", "generator", "judge", "executor", "learner", "evaluator", "monitor"]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A compose project on a running engine with the images built; taken down (volumes
    too) after the test."""
    built = engine_with_images()
    project = cs.Project.create(tmp_path_factory.mktemp("compose") / "secrets")
    project.images = _image_lines(built.stdout)
    yield project
    subprocess.run(["docker", "compose", "down", "--volumes", "--timeout", "5"], cwd=cs.ROOT,
                   env=project.env, capture_output=True, timeout=120)


def _image_lines(out: str) -> dict[str, str]:
    """image ref -> how it was made, from `python -m deploy.images` output."""
    lines = [line.split(maxsplit=2) for line in out.splitlines() if line.startswith("image ")]
    return {ref: rest for _, ref, rest in lines}


def test_image_build_is_cached_by_content_hash(project):
    """A second build with nothing changed finds the same three images by content hash."""
    again = cs.build_images(timeout_s=300)
    assert again.returncode == 0, again.stderr
    images = _image_lines(again.stdout)
    assert [ref.split(":")[0] for ref in images] == ["whetstone/nats", "whetstone/slim", "whetstone/ml"]
    assert set(images) == set(project.images)
    assert all("found by content hash" in how for how in images.values()), again.stdout


async def test_compose_stack_scales_mid_run_and_loses_nothing(project):
    """up; 40 jobs; scale executors 1 -> 3 (the new ones take work); more jobs; back to 1;
    every attempt gets exactly one passing verdict; down; after up again, the work that was
    in flight at down is finished, once."""
    await project.compose("up", "-d", timeout_s=300)
    await project.wait_healthy(SERVICES, timeout_s=300)
    status = project.whet("status", "--json")
    assert status.returncode == 0, status.stderr
    kinds = {a["kind"] for a in json.loads(status.stdout)["actors"] if a["state"] == "ready"}
    assert kinds >= set(SERVICES) - {"nats"}

    bus = await project.bus()
    try:
        await cs.publish(bus, cs.sleepy_attempts("up", 40))
        first = await _wait_for_work(bus, set(), minimum=1)
        assert len(first) == 1, first
        await project.compose("up", "-d", "--scale", "executor=3", "--no-recreate", timeout_s=120)
        scaled_at = time.monotonic()
        busy = await _wait_for_work(bus, set(first), minimum=2, timeout_s=90)
        took_work_s = time.monotonic() - scaled_at
        await cs.publish(bus, cs.sleepy_attempts("down", 20))
        assert len(await project.containers("executor")) == 3
        await project.compose("up", "-d", "--scale", "executor=1", "--no-recreate", timeout_s=120)
        running = [c for c in await project.containers("executor") if c["State"]["Running"]]
        assert len(running) == 1
        found = {**await cs.wait_verdicts(bus, "up", 40, timeout_s=240),
                 **await cs.wait_verdicts(bus, "down", 20, timeout_s=120)}
        _assert_once_and_passed(found, 60)
        ran_on = {v[0].attempt.turns[-1].executor for v in found.values()}
        assert len(ran_on - set(first)) >= 2, (ran_on, first, busy, took_work_s)
    finally:
        await bus.close()
    tail = project.whet("tail", "--no-follow", "--json", "--actor", "executor", "--event", "actor.started")
    started = {json.loads(line)["instance"] for line in tail.stdout.splitlines()}
    assert started >= ran_on, (tail.stdout, tail.stderr)
    await _down_loses_nothing(project)


async def _wait_for_work(bus, seen: set[str], minimum: int, timeout_s: float = 60.0) -> dict[str, int]:
    """Executor instances (not in `seen`) with work done, once `minimum` of them have some."""
    beats: dict = {}
    busy: dict[str, int] = {}

    async def working() -> bool:
        nonlocal beats, busy
        beats = await cs.executor_beats(bus)
        busy = {i: b.processed for i, b in beats.items() if b.processed > 0 and i not in seen}
        return len(busy) >= minimum

    await until(working, timeout_s, lambda: {i: (b.state, b.processed) for i, b in beats.items()})
    return busy


def _assert_once_and_passed(found: dict, count: int) -> None:
    assert len(found) == count
    twice = {aid: len(vs) for aid, vs in found.items() if len(vs) != 1}
    assert not twice, f"attempts with more than one verdict: {twice}"
    failed = {aid: (vs[0].outcome, vs[0].cause, vs[0].evidence[:200])
              for aid, vs in found.items() if vs[0].outcome != "pass"}
    assert not failed, failed


async def _down_loses_nothing(project) -> None:
    """Work in flight at `down` is still there after `up`: finished once each."""
    bus = await project.bus()
    try:
        await cs.publish(bus, cs.sleepy_attempts("held", 12))
        await cs.wait_verdicts(bus, "held", 1, timeout_s=60)
        assert len(await cs.verdicts(bus, "held")) < 12  # so work is in flight at `down`
    finally:
        await bus.close()
    await project.compose("down", timeout_s=180)
    assert await project.containers() == []
    await project.compose("up", "-d", "nats", "setup", "judge", "executor", timeout_s=120)
    await project.wait_healthy(["nats", "judge", "executor"], timeout_s=180)
    bus = await project.bus()
    try:
        _assert_once_and_passed(await cs.wait_verdicts(bus, "held", 12, timeout_s=120), 12)
    finally:
        await bus.close()
    assert _follow_logs_until(project, "executor", "actor.started", timeout_s=30)


def _follow_logs_until(project, service: str, text: str, timeout_s: float) -> bool:
    """`docker compose logs -f SERVICE` shows a line containing `text` (then it is stopped)."""
    proc = subprocess.Popen(["docker", "compose", "logs", "-f", "--no-color", service], cwd=cs.ROOT,
                            env=project.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)

    def stop() -> None:  # the Docker CLI and its compose plugin
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout_s, stop)  # `-f` never ends by itself
    timer.start()
    try:
        return any(text in line for line in proc.stdout)
    finally:
        timer.cancel()
        stop()
        proc.wait(timeout=10)
