"""What a host running only workers gets, without an engine (test_compose_workers.py runs
it for real): `whet auth export-worker` copies those roles' passwords and TLS files and
nothing else, and they log in to a TLS server; docker-compose.workers.yml runs the same
worker services as docker-compose.yml, without NATS, setup or other roles, pointed at
WHET_NATS_URL; its TLS override mounts exactly the exported files."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bus import subjects
from bus.messages import ExecutionDone, ExecutionResult
from bus.nats_bus import Bus, Identity
from runtime.broker import auth, certs
from runtime.broker.embedded import EmbeddedServer
from runtime.config import RunConfig
from runtime.connect import topology
from runtime.stack import credentials
from tests.conftest import ROOT, STORE_MB
from tests.test_auth import AUTH, REQUEST
from tests.test_auth_tls import settings_for

WORKERS = ("generator", "executor", "judge")


@pytest.fixture(scope="module")
def secrets(tmp_path_factory) -> Path:
    """The first host's secrets: every password, a CA and every certificate."""
    folder = tmp_path_factory.mktemp("secrets")
    credentials.ensure_passwords(folder)
    certs.ensure(credentials.tls_dir(folder))
    return folder


def export(secrets: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.cli", "auth", "export-worker",
                           str(secrets), str(out), *args], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.unit
def test_export_copies_only_the_worker_roles_files_owner_only(secrets, tmp_path):
    """The default export holds the three worker roles' passwords, the CA's certificate and
    their certificates and keys, byte for byte; no admin, CA key, server files or users
    block; folders 0700, files 0600."""
    (secrets / "nats-auth.conf").write_text("authorization {}\n")
    out = tmp_path / "worker"
    r = export(secrets, out)
    assert r.returncode == 0, r.stderr
    expected = {*WORKERS, "tls/ca.pem"} | {f"tls/{r}{s}.pem" for r in WORKERS for s in ("", "-key")}
    assert files_under(out) == expected
    assert set(r.stdout.split()) == {str(out / f) for f in expected}
    for name in expected:
        assert (out / name).read_bytes() == (secrets / name).read_bytes(), name
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600, name
    assert {stat.S_IMODE(d.stat().st_mode) for d in (out, out / "tls")} == {0o700}


@pytest.mark.unit
def test_export_without_tls_copies_passwords_only(tmp_path):
    """A secrets folder without TLS files exports just the chosen roles' passwords."""
    credentials.ensure_passwords(tmp_path / "s")
    r = export(tmp_path / "s", tmp_path / "w", "--roles", "executor,judge")
    assert r.returncode == 0, r.stderr
    assert files_under(tmp_path / "w") == {"executor", "judge"}


@pytest.mark.unit
@pytest.mark.parametrize("roles, message", [
    ("executor,admin", "roles admin: a worker host may get only these roles"),
    ("executor,chef", "roles chef:"),
    (",", "roles (none):"),
])
def test_export_refuses_admin_and_unknown_roles(secrets, tmp_path, roles, message):
    """admin, an unknown role or none is refused with one line, and nothing is written."""
    r = export(secrets, tmp_path / "w", "--roles", roles)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "w").exists()


@pytest.mark.unit
def test_export_into_the_secrets_folder_itself_is_refused(secrets):
    """Exporting onto the source folder would truncate its files: refused, files intact."""
    before = (secrets / "executor").read_bytes()
    with pytest.raises(credentials.RunError, match="another folder"):
        credentials.export_worker(secrets, secrets / ".." / secrets.name, ["executor"])
    assert (secrets / "executor").read_bytes() == before


@pytest.mark.unit
def test_export_names_a_missing_file(secrets, tmp_path):
    """A missing certificate is named with the command that makes it; nothing is written."""
    partial = tmp_path / "s"
    credentials.ensure_passwords(partial)
    (partial / "tls").mkdir()
    for f in ("ca.pem", "executor.pem"):
        (partial / "tls" / f).write_bytes((secrets / "tls" / f).read_bytes())
    r = export(partial, tmp_path / "w", "--roles", "executor")
    assert r.returncode == 2, r.stderr
    assert "executor-key.pem" in r.stderr and "whet auth certs" in r.stderr
    assert not (tmp_path / "w").exists()


@pytest.mark.bus
async def test_exported_files_log_in_to_a_tls_server_as_their_role(secrets, tmp_path):
    """An executor with only the exported files connects to a server that requires TLS and
    client certificates and publishes its results."""
    out = tmp_path / "worker"
    assert export(secrets, out, "--roles", "executor").returncode == 0
    config = (credentials.server_tls_block(credentials.tls_dir(secrets))
              + auth.server_config(AUTH, credentials.read_passwords(secrets)))
    srv = EmbeddedServer(tmp_path / "nats", extra_config=config, max_file_store_mb=STORE_MB)
    srv.start()
    try:
        admin = await Bus.connect(settings_for(srv.url, secrets, auth.ADMIN), Identity("cli", "c"))
        executor = await Bus.connect(settings_for(srv.url, out, "executor"), Identity("executor", "e"))
        try:
            await admin.ensure_topology(topology(RunConfig()))
            done = ExecutionDone(request=REQUEST, result=ExecutionResult(status="ok"), executor="e")
            await executor.publish(subjects.EXEC_DONE, done, msg_id="d1")
            [state] = await admin.stream_states([subjects.STREAM_EXEC_DONE])
            assert state.messages == 1
        finally:
            await executor.close()
            await admin.close()
    finally:
        srv.kill()


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


@pytest.mark.unit
def test_worker_compose_runs_the_stack_services_pointed_at_another_host():
    """docker-compose.workers.yml: the generator, executor and judge services of
    docker-compose.yml (same image, command, entrypoint, capabilities, volumes, health
    check, role), no NATS, setup or dependency on them, WHET_NATS_URL required."""
    base, workers = load("docker-compose.yml"), load("docker-compose.workers.yml")
    assert set(workers["services"]) == set(WORKERS)
    same = ("image", "command", "entrypoint", "cap_add", "security_opt", "volumes",
            "healthcheck", "init", "restart", "stop_grace_period", "secrets")
    for name, svc in workers["services"].items():
        for key in same:
            assert svc.get(key) == base["services"][name].get(key), (name, key)
        assert "depends_on" not in svc and "ports" not in svc, name
        env = svc["environment"]
        assert env["WHET_NATS_URL"].startswith("${WHET_NATS_URL:?")
        assert {k: v for k, v in env.items() if k != "WHET_NATS_URL"} \
            == base["services"][name]["environment"], name
    assert workers["secrets"] == {r: base["secrets"][r] for r in WORKERS}


@pytest.mark.unit
def test_worker_tls_override_mounts_exactly_the_exported_files(secrets, tmp_path):
    """docker-compose.workers.tls.yml gives each worker service the CA and its role's
    certificate and key, as docker-compose.tls.yml does, and needs no file the export
    leaves out."""
    tls, stack_tls = load("docker-compose.workers.tls.yml"), load("docker-compose.tls.yml")
    assert set(tls["services"]) == set(WORKERS)
    for name, svc in tls["services"].items():
        assert svc == stack_tls["services"][name], name
    assert export(secrets, tmp_path / "w").returncode == 0
    prefix = "${WHET_SECRETS_DIR:-./secrets}/"
    needed = {spec["file"].removeprefix(prefix) for spec in tls["secrets"].values()}
    assert needed == files_under(tmp_path / "w") - set(WORKERS)
