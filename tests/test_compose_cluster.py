"""The cluster, TLS and learner-ranks stacks together, brought up for real: the compose
stack on three routed NATS nodes that each require TLS and a client certificate, with the
learner as two ranks in two containers, trains; a node is killed and started again while it
trains, and `down` removes it all.

Same engine and images as tests/test_compose.py (cached by content hash); the files are
docker-compose.yml, .cluster.yml, .tls.yml and .cluster.tls.yml, the config
configs/compose-cluster-ranks.toml. The stack's tiny model passes nothing, so its own groups
carry no signal and the learner only renumbers; the test adds groups with signal to the
verdict stream (as a judge would), which the two ranks then train on. The stack is torn
down with its volumes afterwards.
"""

from __future__ import annotations

import json
import subprocess

import anyio
import pytest

from bench.compose import project as cs
from bus import subjects
from policy.versions import current_version
from tests.conftest import patiently, until
from tests.support.compose_engine import engine_with_images
from tests.test_learner_crash import synthetic_verdicts

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]
NODES = ["nats", "nats-2", "nats-3"]
ACTORS = ["sampler", "generator", "judge", "executor", "learner", "learner_rank", "evaluator",
          "monitor"]


@pytest.fixture
def cluster(tmp_path):
    """A compose project of the cluster and TLS overrides and the learner-ranks profile;
    taken down (volumes too) after the test."""
    engine_with_images()
    project = cs.Project.create(tmp_path / "secrets", tls=True, cluster=True)
    project.env.update({"COMPOSE_PROFILES": "learner-ranks",
                        "WHET_CONFIG": "compose-cluster-ranks.toml"})
    yield project
    subprocess.run(["docker", "compose", "down", "--volumes", "--timeout", "5"], cwd=cs.ROOT,
                   env=project.env, capture_output=True, timeout=180)


async def test_cluster_with_two_learner_ranks_trains_through_a_node_kill(cluster):
    """up: three nodes and every actor healthy, rank 1 in its own container, every node
    requiring TLS and a client certificate; two trained versions; streams hold 3 replicas;
    `nats-2` killed, a trained version more while it is down, started again and reached by
    its own name over TLS; `down` leaves no container."""
    await cluster.compose("up", "-d", timeout_s=400)
    await cluster.wait_healthy(NODES + ACTORS, timeout_s=400)
    for port in ("WHET_NATS_PORT", "WHET_NATS_PORT_2", "WHET_NATS_PORT_3"):
        info = cs.server_info("127.0.0.1", int(cluster.env[port]))
        assert info["tls_required"] and info["tls_verify"], info
    status = cluster.whet("status", "--json")
    assert status.returncode == 0, status.stderr
    ready = {a["kind"] for a in json.loads(status.stdout)["actors"] if a["state"] == "ready"}
    assert ready >= set(ACTORS), ready

    bus = await cluster.bus()
    try:
        first = await trained_version(bus, "a", "")
        second = await trained_version(bus, "b", first.object_name)
        info = await patiently(lambda: bus.js.stream_info(subjects.STREAM_VERDICTS))
        assert info.config.num_replicas == 3, info.config
        await cluster.compose("kill", "nats-2", timeout_s=60)
        await trained_version(bus, "c", second.object_name)
        await cluster.compose("start", "nats-2", timeout_s=60)
        await cluster.wait_healthy(NODES, timeout_s=120)
        assert await status_inside(cluster, "nats-2")
    finally:
        await bus.close()
    logs = await cluster.compose("logs", "--no-color", "learner_rank", check=False)
    assert "learner.rank_seated" in logs, logs[-3000:]
    await cluster.compose("down", timeout_s=180)
    assert await cluster.containers() == []


async def status_inside(project: cs.Project, node: str, timeout_s: float = 180.0) -> set[str]:
    """The kinds `whet status` lists as ready when run in a `setup` container (admin's
    certificate) against `node` alone, by the name the server's certificate must cover.
    A node that has just rejoined is healthy before the replicated buckets answer through it
    (a KV get timed out once right after a restart): `whet status` asks again for 30 s
    (`gather_patiently`) and then says so in one line, asked again here up to `timeout_s`.
    A traceback, or any other failure, fails at once."""
    command = ["docker", "compose", "run", "--rm", "--no-deps", "-e", "WHET_NATS_USER=admin",
               "-e", "WHET_NATS_PASSWORD_FILE=/run/secrets/admin", "setup", "status", "--json",
               "--url", f"nats://{node}:4222"]
    with anyio.fail_after(timeout_s):
        while True:
            proc = await anyio.run_process(command, cwd=cs.ROOT, env=project.env, check=False)
            out = proc.stdout.decode(errors="replace")
            said = out + proc.stderr.decode(errors="replace")
            if proc.returncode == 0 or "whet: read the stack's status" not in said:
                break
    assert proc.returncode == 0, out[-2000:] + proc.stderr.decode(errors="replace")[-2000:]
    return {a["kind"] for a in json.loads(out[out.index("{"):])["actors"] if a["state"] == "ready"}


async def trained_version(bus, tag: str, after: str, tries: int = 3):
    """The first version trained after the one stored as `after`: four groups with signal
    at the current version go to the verdict stream, again if none is trained within 90 s.
    Bus calls are retried (`patiently`): a replicated stream or bucket answers only once it
    has a leader, after `up` and again after a node is killed."""
    found = None
    for attempt in range(tries):
        now = await patiently(lambda: current_version(bus))
        batch = synthetic_verdicts(4, now.version if now else 0, (1.0, 0.0),
                                   prefix=f"{tag}{attempt}-")
        await patiently(lambda: bus.publish_many(subjects.verdict_subject("train"),
                                                 [(v.verdict_id, v) for v in batch]))

        async def trained() -> bool:
            nonlocal found
            found = await patiently(lambda: current_version(bus))
            return found is not None and found.object_name not in ("", after)

        try:
            await until(trained, 90, "a trained version")
            return found
        except TimeoutError:
            continue
    raise AssertionError(f"no version trained after {after or 'the initial weights'} in "
                         f"{tries} tries; the newest is {found}")
