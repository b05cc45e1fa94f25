"""The image and compose definitions match the code, without an engine (test_compose.py runs
them for real): every package is copied into the images, every actor kind is a service with
its own NATS role, health check and init, images are pinned to this environment's versions,
the NATS service flushes to disk as WHET_NATS_SYNC_INTERVAL says, the container commands
refuse bad input clearly, and the cluster override runs three routed NATS nodes that every
actor knows (with TLS, each node has the server's files)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from urllib.parse import urlsplit

import pytest
import yaml

from deploy import images, wheels
from runtime.broker.auth import AuthConfig, role_of, roles
from bus.nats_bus import servers
from runtime.broker.cluster import free_ports
from runtime.broker.embedded import server_binary
from runtime.config import load
from runtime.kinds import KINDS
from tests.conftest import until_sync

ROOT = images.ROOT
ML_KINDS = {"generator", "learner", "learner_rank", "evaluator"}


@pytest.mark.unit
def test_dockerfiles_copy_every_package_the_project_installs():
    """slim and ml copy exactly the packages pyproject.toml lists (a new one must be added)."""
    packages = set(images.source_files()) - {"pyproject.toml", "README.md"}
    for name in ("slim", "ml"):
        text = (ROOT / images.IMAGES[name].dockerfile).read_text()
        assert set(re.findall(r"^COPY (\w+) /src/\1$", text, re.M)) == packages, name


@pytest.mark.unit
def test_every_actor_kind_is_a_service_logged_in_as_its_role():
    """One service per kind: its image, `whet actor KIND`, its role's user and password,
    init, a health check and a grace period longer than the drain."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(KINDS) <= set(services)
    for kind in KINDS:
        svc, role = services[kind], role_of(kind, AuthConfig())
        assert svc["command"] == ["actor", kind]
        assert svc["image"].startswith("whetstone/ml:" if kind in ML_KINDS else "whetstone/slim:")
        assert svc["environment"]["WHET_NATS_USER"] == role
        assert svc["secrets"] == [{"source": role, "target": "role"}]
        assert svc["init"] is True and svc["healthcheck"]["test"]
        assert svc["depends_on"]["setup"]["condition"] == "service_completed_successfully"
    assert set(compose["secrets"]) == set(roles()) | {"nats-auth"}
    assert services["nats"]["ports"] == ["${WHET_NATS_BIND:-127.0.0.1}:${WHET_NATS_PORT:-4222}:4222"]


SLIM_BLOCKED = ("torch", "transformers", "deepspeed", "peft", "vllm")


@pytest.mark.unit
def test_the_slim_image_runs_whet_and_its_kinds_without_torch():
    """The slim image (setup, sampler, executor, judge, monitor) has no torch: `whet` and
    each of its kinds' modules import with the ML packages absent (a top-level import of
    one, even two modules down, fails here rather than in a container)."""
    slim = sorted(KINDS[k].split(":")[0] for k in KINDS if k not in ML_KINDS)
    code = (f"import sys; sys.modules.update(dict.fromkeys({SLIM_BLOCKED!r}));"
            f"import runtime.cli.main, {', '.join(slim)}")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.unit
def test_images_are_pinned_to_this_environment():
    """Wheel sets pin what is installed here; a package that is not is a clear error."""
    versions = wheels.installed()
    assert wheels.pinned("torch>=2.13", versions) == f"torch=={versions['torch']}"
    with pytest.raises(RuntimeError, match="not installed"):
        wheels.pinned("no-such-package", versions)
    ml = wheels.wheel_sets()["ml"]
    assert wheels.folder(ml, versions) != wheels.folder(ml, {**versions, "torch": "0"})


@pytest.mark.unit
@pytest.mark.parametrize("args, message", [
    (["actor", "nosuchkind", "--config", "configs/compose.toml"], "unknown actor kind"),
    (["setup", "--config", "configs/default.toml"], "bus.url"),
])
def test_container_commands_refuse_bad_input_clearly(args, message):
    """An unknown kind, or a config without a NATS URL, exits 2 with one line naming it."""
    env = {k: v for k, v in os.environ.items() if k != "WHET_NATS_URL"}
    proc = subprocess.run([sys.executable, "-m", "runtime.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def compose_value(template: str, env: dict[str, str]) -> str:
    """What docker compose makes of the `${VAR:-default}` in `template`."""
    return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: env.get(m[1]) or m[2], template)


@pytest.mark.bus
@pytest.mark.parametrize("setting, always, interval_s", [
    (None, False, 120), ("always", True, None), ("10s", False, 10)])
def test_the_nats_service_flushes_to_disk_as_its_variable_says(tmp_path, setting, always,
                                                               interval_s):
    """docker-compose.yml hands WHET_NATS_SYNC_INTERVAL (default 2m) to the NATS service,
    quoted; nats-server runs deploy/nats.conf with it, and its /varz shows the interval."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    value = compose_value(compose["services"]["nats"]["environment"]["WHET_NATS_SYNC_INTERVAL"],
                          {"WHET_NATS_SYNC_INTERVAL": setting} if setting else {})
    conf = (ROOT / "deploy" / "nats.conf").read_text()
    assert "sync_interval: $WHET_NATS_SYNC_INTERVAL" in conf
    # Only where it listens and stores differs from the container.
    conf = (conf.replace("0.0.0.0:4222", "127.0.0.1:-1").replace("0.0.0.0:8222", '"127.0.0.1:-1"')
            .replace('"/data"', f'"{tmp_path / "data"}"'))
    (tmp_path / "nats.conf").write_text(conf)
    (tmp_path / "auth.conf").write_text("")
    proc = subprocess.Popen([server_binary(), "-c", str(tmp_path / "nats.conf"),
                             "--ports_file_dir", str(tmp_path)],
                            env={**os.environ, "WHET_NATS_SYNC_INTERVAL": value},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def ports_written() -> bool:
            if list(tmp_path.glob("*.ports")):
                return True
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            return False

        until_sync(ports_written, 20, "nats-server wrote no ports file")
        [ports] = tmp_path.glob("*.ports")
        url = json.loads(ports.read_text())["monitoring"][0]
        with urllib.request.urlopen(f"{url}/varz", timeout=5) as r:
            js = json.loads(r.read())["jetstream"]["config"]
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert js.get("sync_always", False) is always
    if interval_s is not None:
        assert js["sync_interval"] == interval_s * 10**9


@pytest.mark.unit
def test_the_cluster_override_gives_every_actor_the_three_nodes():
    """docker-compose.cluster.yml runs nats, nats-2 and nats-3 from nats-cluster.conf, each
    named and stored apart; setup waits for all three; every actor and setup read
    compose-cluster.toml, which lists the three nodes and keeps three replicas."""
    base = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    over = yaml.safe_load((ROOT / "docker-compose.cluster.yml").read_text())["services"]
    nodes = ("nats", "nats-2", "nats-3")
    assert {over[n]["environment"]["WHET_NATS_NAME"] for n in nodes} == {"nats-1", "nats-2", "nats-3"}
    assert all(over[n]["command"] == ["--config", "/etc/nats/nats-cluster.conf"] for n in nodes)
    assert len({(over[n].get("volumes") or base[n]["volumes"])[0] for n in nodes}) == 3
    assert set(over["setup"]["depends_on"]) == {"nats-2", "nats-3"}
    for kind in (*KINDS, "setup"):
        config = compose_value(over[kind]["environment"]["WHET_CONFIG"], {})
        assert config == "/etc/whetstone/configs/compose-cluster.toml", kind
    cfg = load(ROOT / "configs" / "compose-cluster.toml")
    assert cfg.bus.replicas == 3
    assert [urlsplit(u).hostname for u in servers(cfg.bus.url)] == list(nodes)


@pytest.mark.unit
def test_the_cluster_tls_override_gives_every_node_the_server_files():
    """docker-compose.cluster.tls.yml mounts into nats-2 and nats-3 exactly the server files
    docker-compose.tls.yml mounts into nats; a node without them (the override left out)
    stops with a line naming the file to add."""
    tls = yaml.safe_load((ROOT / "docker-compose.tls.yml").read_text())["services"]
    over = yaml.safe_load((ROOT / "docker-compose.cluster.tls.yml").read_text())["services"]
    assert set(over) == {"nats-2", "nats-3"}
    assert all(over[n]["secrets"] == tls["nats"]["secrets"] for n in over)
    cluster = yaml.safe_load((ROOT / "docker-compose.cluster.yml").read_text())["services"]
    for node in over:
        script = cluster[node]["entrypoint"][2]
        assert "docker-compose.cluster.tls.yml" in script and "exit 2" in script
        assert "/etc/nats/tls/server.pem" in script


@pytest.mark.bus
def test_the_cluster_config_forms_one_jetstream_cluster(tmp_path):
    """Three nats-servers on deploy/nats-cluster.conf (only listen addresses, routes and store
    changed from the containers') elect a meta leader with three peers."""
    conf = (ROOT / "deploy" / "nats-cluster.conf").read_text()
    client, route = free_ports(3), free_ports(3)
    for host, port in zip(("nats", "nats-2", "nats-3"), route):
        conf = conf.replace(f"nats-route://{host}:6222", f"nats-route://127.0.0.1:{port}")
    procs = []
    try:
        for i in range(3):
            node = tmp_path / f"n{i}"
            node.mkdir()
            (node / "auth.conf").write_text("")
            (node / "nats.conf").write_text(
                conf.replace("0.0.0.0:4222", f"127.0.0.1:{client[i]}")
                .replace("0.0.0.0:8222", '"127.0.0.1:-1"')
                .replace("0.0.0.0:6222", f"127.0.0.1:{route[i]}")
                .replace('"/data"', f'"{node / "data"}"'))
            procs.append(subprocess.Popen(
                [server_binary(), "-c", str(node / "nats.conf"), "--ports_file_dir", str(node)],
                env={**os.environ, "WHET_NATS_NAME": f"nats-{i + 1}",
                     "WHET_NATS_SYNC_INTERVAL": '"2m"'},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        meta: dict = {}

        def three_nodes_met() -> bool:
            nonlocal meta
            meta = _meta(tmp_path / "n0")
            if meta.get("leader") and meta.get("cluster_size") == 3:
                return True
            assert all(p.poll() is None for p in procs), "a node exited"
            return False

        until_sync(three_nodes_met, 30, lambda: f"no 3-node meta group: {meta}")
        assert meta["leader"] in {"nats-1", "nats-2", "nats-3"}
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)


def _meta(node_dir) -> dict:
    """The meta group as one node's /jsz shows it ({} before it answers)."""
    try:
        [ports] = node_dir.glob("*.ports")
        url = json.loads(ports.read_text())["monitoring"][0]
        with urllib.request.urlopen(f"{url}/jsz", timeout=2) as r:
            return json.loads(r.read()).get("meta_cluster") or {}
    except (ValueError, OSError):
        return {}


@pytest.mark.unit
def test_every_compose_config_trains_until_the_stack_is_brought_down():
    """The compose configs set no step cap: a service stack runs until `down`, and its tiny
    model's groups carry no signal, so a cap (default.toml's 24 steps) would be spent on
    renumbered versions within minutes and the learner would train nothing more (it once
    left test_compose_cluster's last synthetic groups untrained at step 24)."""
    for path in sorted((ROOT / "configs").glob("compose*.toml")):
        assert load(path).training.max_steps == 0, path.name
