"""TLS across hosts with whetstone's own CA, against a real nats-server with the generated config.

A client presenting its role's certificate connects and works within its role's subjects
(and is still refused another role's); a plaintext client, a client without a certificate
and one whose certificate comes from another CA are refused; an expired or missing
certificate is an error naming the file and `whet auth certs`, a server certificate that
lacks the name dialed one naming the `--host` to add. `whet up` with `[auth] tls` makes the
files, and its actors and CLI connect with them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from bus import subjects
from bus.errors import PermissionDenied, TlsFailed
from bus.messages import ExecutionDone, ExecutionResult
from bus.nats_bus import Bus, Identity
from runtime import config as config_mod
from runtime.broker import auth, certs
from runtime.broker.embedded import EmbeddedServer, server_binary
from runtime.config import RunConfig
from runtime.connect import topology
from runtime.stack import credentials
from tests.conftest import ROOT, STORE_MB, bus_settings, until
from tests.test_auth import AUTH, REQUEST, VERDICT


@pytest.fixture(scope="module")
def secrets(tmp_path_factory) -> Path:
    """A secrets folder with passwords, a CA and every certificate (made once: 0.3 s)."""
    folder = tmp_path_factory.mktemp("secrets")
    credentials.ensure_passwords(folder)
    certs.ensure(credentials.tls_dir(folder))
    return folder


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory) -> Path:
    """The same files from another CA (a stranger's set-up)."""
    folder = credentials.tls_dir(tmp_path_factory.mktemp("other"))
    certs.ensure(folder)
    return folder


@pytest.fixture
def server(tmp_path, secrets):
    """A nats-server that requires TLS with a client certificate of our CA, and passwords."""
    config = (credentials.server_tls_block(credentials.tls_dir(secrets))
              + auth.server_config(AUTH, credentials.read_passwords(secrets)))
    srv = EmbeddedServer(tmp_path / "nats", extra_config=config, max_file_store_mb=STORE_MB)
    srv.start()
    yield srv
    srv.kill()


def settings_for(url: str, secrets: Path, role: str, tls_dir: Path | None = None, **files):
    """`role`'s login with the CA, certificate and key of `tls_dir` (ours by default)."""
    d = tls_dir or credentials.tls_dir(secrets)
    chosen = dict(tls_ca_file=str(certs.cert_path(d, certs.CA)),
                  tls_cert_file=str(certs.cert_path(d, role)),
                  tls_key_file=str(certs.key_path(d, role)))
    chosen.update(files)
    return bus_settings(url, user=role, password=(secrets / role).read_text().strip(),
                        connect_timeout_s=10.0, **chosen)


async def refused(settings) -> str:
    """The TlsFailed message of a connect with `settings`, which must fail fast."""
    with anyio.fail_after(8):  # well inside connect_timeout_s: no retrying a refusal
        with pytest.raises(TlsFailed) as caught:
            await Bus.connect(settings, Identity("executor", "x"))
    return str(caught.value)


@pytest.mark.unit
def test_certs_cover_the_hosts_and_keys_are_owner_only(tmp_path):
    """`whet auth certs` makes a CA, a server certificate with every --host as a SAN and one
    client certificate per role, keys 0600; a second run keeps them, --renew keeps the CA."""
    def whet(*args):
        r = subprocess.run([sys.executable, "-m", "runtime.cli", "auth", *args], cwd=ROOT,
                           text=True, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    out = whet("certs", str(tmp_path), "--host", "10.0.0.7", "--host", "gpu-1.example")
    d = tmp_path / "tls"
    assert out.count("(created") == 2 + len(auth.roles())
    text = subprocess.run(["openssl", "x509", "-in", str(d / "server.pem"), "-noout", "-ext",
                           "subjectAltName"], text=True, capture_output=True, check=True).stdout
    for name in ("DNS:localhost", "IP Address:127.0.0.1", "DNS:nats", "IP Address:10.0.0.7",
                 "DNS:gpu-1.example"):
        assert name in text
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(d / "ca.pem"), "-purpose",
                             "sslclient", *(str(d / f"{role}.pem") for role in auth.roles())],
                            text=True, capture_output=True)
    assert verify.returncode == 0 and verify.stdout.count(": OK") == len(auth.roles()), \
        verify.stdout + verify.stderr
    keys = sorted(d.glob("*-key.pem"))
    assert len(keys) == 2 + len(auth.roles())
    assert all(k.stat().st_mode & 0o777 == 0o600 for k in keys)
    assert d.stat().st_mode & 0o777 == 0o700
    ca, server = (d / "ca.pem").read_bytes(), (d / "server.pem").read_bytes()
    assert {m.state for m in certs.ensure(d, ["10.0.0.7"])} == {"kept"}
    whet("certs", str(tmp_path), "--renew", "--host", "10.0.0.7")
    assert (d / "ca.pem").read_bytes() == ca and (d / "server.pem").read_bytes() != server
    block = whet("server-config", "--tls-dir", "/etc/nats/tls")
    assert 'ca_file: "/etc/nats/tls/ca.pem"' in block and "verify: true" in block


@pytest.mark.unit
def test_a_new_ca_remakes_every_certificate_and_a_missing_ca_key_is_named(tmp_path):
    """Certificates of a CA that was replaced are remade, not kept; where only ca.pem is
    (a host given the files), what is there is kept and what is missing cannot be made."""
    d = tmp_path / "tls"
    certs.ensure(d)
    old = certs.cert_path(d, "executor").read_bytes()
    certs.cert_path(d, certs.CA).unlink()
    assert {m.state for m in certs.ensure(d)[1:]} == {"renewed"}
    assert certs.cert_path(d, "executor").read_bytes() != old
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(certs.cert_path(d, certs.CA)),
                             str(certs.cert_path(d, "executor"))], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
    certs.key_path(d, certs.CA).unlink()
    assert {m.state for m in certs.ensure(d)} == {"kept"}
    certs.cert_path(d, "judge").unlink()
    with pytest.raises(certs.RunError, match="ca-key.pem: missing, so judge.pem cannot be made"):
        certs.ensure(d)


@pytest.mark.bus
async def test_a_role_with_its_certificate_works_and_is_still_refused_other_subjects(server, secrets):
    """Over TLS with client certificates, an executor publishes its results and is refused a
    verdict: permissions are still enforced."""
    admin = await Bus.connect(settings_for(server.url, secrets, auth.ADMIN), Identity("cli", "c"))
    executor = await Bus.connect(settings_for(server.url, secrets, "executor"), Identity("executor", "e"))
    try:
        await admin.ensure_topology(topology(RunConfig()))
        done = ExecutionDone(request=REQUEST, result=ExecutionResult(status="ok"), executor="e")
        await executor.publish(subjects.EXEC_DONE, done, msg_id="d1")
        with pytest.raises(PermissionDenied, match="whet.v1.verdicts.train"):
            await executor.publish(subjects.verdict_subject("train"), VERDICT, msg_id="v1")
        exec_done, verdicts = await admin.stream_states([subjects.STREAM_EXEC_DONE,
                                                         subjects.STREAM_VERDICTS])
        assert (exec_done.messages, verdicts.messages) == (1, 0)
    finally:
        await executor.close()
        await admin.close()


@pytest.mark.bus
def test_a_plaintext_client_is_refused(server, secrets):
    """A client that speaks plain NATS (right password, no TLS) gets no PONG: the server
    announces that TLS is required and closes the connection on the plaintext CONNECT."""
    connect = {"user": "admin", "pass": (secrets / "admin").read_text().strip(),
               "verbose": False, "pedantic": False}
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        info = json.loads(sock.recv(4096).decode().split(" ", 1)[1])
        assert info["tls_required"] is True and info["tls_verify"] is True
        sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        answer = b""
        while chunk := sock.recv(4096):  # the server closes it (else a socket timeout)
            answer += chunk
    assert b"PONG" not in answer and b"+OK" not in answer, answer


@pytest.mark.bus
async def test_a_client_without_a_certificate_is_refused(server, secrets):
    """Trusting the CA is not enough: the server requires a client certificate."""
    message = await refused(settings_for(server.url, secrets, "executor", tls_cert_file="",
                                         tls_key_file=""))
    assert "requires a client certificate" in message and "WHET_NATS_CERT" in message


@pytest.mark.bus
async def test_a_certificate_from_another_ca_is_refused(server, secrets, other_ca):
    """A client certificate of another CA is refused by the server, and a client trusting
    another CA refuses the server: each error names the file and how to remake it."""
    stranger = settings_for(server.url, secrets, "executor",
                            tls_cert_file=str(certs.cert_path(other_ca, "executor")),
                            tls_key_file=str(certs.key_path(other_ca, "executor")))
    message = await refused(stranger)
    assert "not signed by the server's CA" in message
    assert str(certs.cert_path(other_ca, "executor")) in message and "whet auth certs" in message
    wrong_trust = settings_for(server.url, secrets, "executor",
                               tls_ca_file=str(certs.cert_path(other_ca, certs.CA)))
    message = await refused(wrong_trust)
    assert "not trusted by " + str(certs.cert_path(other_ca, certs.CA)) in message


@pytest.mark.bus
async def test_a_server_certificate_without_the_dialed_name_says_which_host_to_add(server,
                                                                                  secrets):
    """A server dialed by a name its certificate lacks (a cluster node's, say) is refused
    with the name and the `whet auth certs --host` that adds it, not a CA to change."""
    # 127.1 reaches 127.0.0.1, but the certificate names only localhost, 127.0.0.1 and nats.
    url = server.url.replace("127.0.0.1", "127.1")
    message = await refused(settings_for(url, secrets, "executor"))
    assert "does not name 127.1" in message, message
    assert "--renew --host 127.1" in message and "WHET_NATS_CA" not in message


@pytest.mark.bus
async def test_an_expired_certificate_is_refused_naming_the_file(server, secrets, tmp_path):
    """A client certificate past its end (made with 0 days) is refused as expired."""
    mine = tmp_path / "tls"
    mine.mkdir()
    ours = credentials.tls_dir(secrets)
    for name in ("ca.pem", "ca-key.pem"):
        (mine / name).write_bytes((ours / name).read_bytes())
    certs.ensure(mine, days=0)  # valid until now: expired by the time it is presented
    message = await refused(settings_for(server.url, secrets, "executor", tls_dir=mine))
    assert "has expired" in message and str(mine / "executor.pem") in message
    assert "--renew" in message


@pytest.mark.bus
async def test_a_missing_certificate_file_is_named_before_connecting(tmp_path):
    """No server is needed to learn that the key file is not there."""
    settings = bus_settings("nats://127.0.0.1:1", tls_ca_file=str(tmp_path / "ca.pem"))
    (tmp_path / "ca.pem").write_text("x")
    cert = tmp_path / "executor.pem"
    with pytest.raises(TlsFailed, match=f"client certificate {cert}: no such file.*whet auth certs"):
        await Bus.connect(bus_settings(settings.url, tls_cert_file=str(cert),
                                       tls_key_file=str(tmp_path / "executor-key.pem")),
                          Identity("executor", "x"))
    with pytest.raises(TlsFailed, match="both WHET_NATS_CERT and WHET_NATS_KEY"):
        await Bus.connect(bus_settings(settings.url, tls_cert_file=str(cert)),
                          Identity("executor", "x"))


@pytest.mark.unit
def test_tls_needs_the_users_and_excludes_a_certificate_of_ones_own(tmp_path):
    """`[auth] tls` without `enabled`, or with `tls_cert_file`, is a config error."""
    path = tmp_path / "c.toml"
    path.write_text("[auth]\ntls = true\n")
    with pytest.raises(config_mod.ConfigError, match="auth.tls.*enabled = true"):
        config_mod.load(path)
    path.write_text('[auth]\nenabled = true\ntls = true\ntls_cert_file = "x.pem"\n')
    with pytest.raises(config_mod.ConfigError, match="auth.tls_cert_file"):
        config_mod.load(path)


@pytest.mark.stack
async def test_stack_with_tls_makes_the_files_and_its_actors_use_them(tmp_path):
    """`whet up` with `[auth] tls`: the run's secrets get a CA and certificates (keys 0600),
    the embedded server requires client certificates, a probe connected with its role's
    certificate does a job, and `whet status` connects as admin with admin's."""
    from tests.conftest import Stack
    from tests.test_runtime import PROBE, all_done, ready_probes, request

    stack = Stack(tmp_path, "", PROBE.format(n=1), "")
    stack.config.write_text(f'[run]\nname = "t"\nruns_dir = "{tmp_path / "runs"}"\n'
                            + PROBE.format(n=1)
                            + '[auth]\nenabled = true\ntls = true\nroles = { probe = "executor" }\n')
    for var in ("WHET_NATS_URL", "WHET_NATS_USER", "WHET_NATS_PASSWORD", "WHET_NATS_TOKEN",
                "WHET_NATS_CA", "WHET_NATS_CERT", "WHET_NATS_KEY"):
        stack.env.pop(var, None)
    stack.start()
    try:
        secrets = stack.run_dir / "secrets"
        d = credentials.tls_dir(secrets)
        assert not certs.missing(d, auth.roles())
        assert all(k.stat().st_mode & 0o777 == 0o600 for k in d.glob("*-key.pem"))
        assert "verify: true" in (stack.run_dir / "nats" / "nats-server.conf").read_text()
        url = (stack.run_dir / "nats.url").read_text().strip()
        no_cert = bus_settings(url, user="admin", password=(secrets / "admin").read_text().strip(),
                               tls_ca_file=str(certs.cert_path(d, certs.CA)))
        with pytest.raises(TlsFailed, match="requires a client certificate"):
            await Bus.connect(no_cert, Identity("cli", "c"))
        files = credentials.role_tls(secrets, auth.ADMIN)
        admin = await Bus.connect(bus_settings(no_cert.url, user="admin", password=no_cert.password,
                                               tls_ca_file=files["WHET_NATS_CA"],
                                               tls_cert_file=files["WHET_NATS_CERT"],
                                               tls_key_file=files["WHET_NATS_KEY"]),
                                  Identity("cli", "c"))
        try:
            await ready_probes(admin, 1)
            await admin.publish(subjects.EXEC_REQUESTS, request(1, 0.0), msg_id="r1")
            (done,) = await all_done(admin, 1, timeout_s=30)
            assert done.executor == "probe-1"
        finally:
            await admin.close()
        status = stack.whet("status", "--json")
        assert status.returncode == 0, status.stderr
        assert [a["instance"] for a in json.loads(status.stdout)["actors"]
                if a["kind"] == "probe"] == ["probe-1"]
    finally:
        stack.stop()
    assert os.path.exists(d / "ca-key.pem")


@pytest.mark.unit
def test_the_compose_override_gives_each_role_its_own_certificate():
    """docker-compose.tls.yml: every actor service (and setup, as admin) gets the CA and its
    role's certificate and key, each named by the variables the client reads; NATS gets its
    server files where `--tls-dir /etc/nats/tls` says; the CA's key is mounted nowhere."""
    import yaml

    from runtime.kinds import KINDS

    base = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    tls = yaml.safe_load((ROOT / "docker-compose.tls.yml").read_text())
    files = {name: spec["file"].replace("${WHET_SECRETS_DIR:-./secrets}/tls/", "")
             for name, spec in tls["secrets"].items()}
    assert "ca-key.pem" not in files.values()
    for service, role in [("setup", auth.ADMIN)] + [(k, auth.role_of(k, auth.AuthConfig()))
                                                    for k in KINDS]:
        svc = tls["services"][service]
        mounted = {s["target"]: files[s["source"]] for s in svc["secrets"]}
        assert mounted == {"ca.pem": "ca.pem", "cert.pem": f"{role}.pem",
                           "key.pem": f"{role}-key.pem"}, service
        assert {svc["environment"][v] for v in ("WHET_NATS_CA", "WHET_NATS_CERT", "WHET_NATS_KEY")} \
            == {f"/run/secrets/{t}" for t in mounted}
    assert set(tls["services"]) == {"nats", "setup", *KINDS} and set(KINDS) <= set(base["services"])
    server = {s["target"]: files[s["source"]] for s in tls["services"]["nats"]["secrets"]}
    d = Path("/etc/nats/tls")
    assert server == {str(certs.cert_path(d, n)): certs.cert_path(Path(), n).name
                      for n in (certs.CA, certs.SERVER)} | {
        str(certs.key_path(d, certs.SERVER)): certs.key_path(Path(), certs.SERVER).name}


@pytest.mark.bus
async def test_the_compose_nats_config_with_the_tls_block_requires_certificates(tmp_path, secrets):
    """deploy/nats.conf including `whet auth server-config --tls-dir` output: an executor with
    its certificate connects, one without is refused."""
    conf = (ROOT / "deploy" / "nats.conf").read_text()
    conf = (conf.replace("0.0.0.0:4222", "127.0.0.1:-1").replace("0.0.0.0:8222", '"127.0.0.1:-1"')
            .replace('"/data"', f'"{tmp_path / "data"}"')
            .replace("$WHET_NATS_SYNC_INTERVAL", '"2m"'))
    (tmp_path / "nats.conf").write_text(conf)
    r = subprocess.run([sys.executable, "-m", "runtime.cli", "auth", "server-config", "--secrets-dir",
                        str(secrets), "--tls-dir", str(credentials.tls_dir(secrets)), "--out",
                        str(tmp_path / "auth.conf")], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    proc = subprocess.Popen([server_binary(), "-c", str(tmp_path / "nats.conf"),
                             "--ports_file_dir", str(tmp_path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        def ports_written() -> bool:
            if list(tmp_path.glob("*.ports")):
                return True
            assert proc.poll() is None, "nats-server refused the config"
            return False

        await until(ports_written, 20, "nats-server's ports file")
        [ports] = tmp_path.glob("*.ports")
        url = json.loads(ports.read_text())["nats"][0].replace("tls://", "nats://")
        executor = await Bus.connect(settings_for(url, secrets, "executor"),
                                     Identity("executor", "e"))
        await executor.close()
        message = await refused(settings_for(url, secrets, "executor", tls_cert_file="",
                                             tls_key_file=""))
        assert "requires a client certificate" in message
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.bus
def test_up_against_a_server_without_the_certificates_names_them(tmp_path, nats_server):
    """`whet up` against another server with `[auth] tls` and a secrets folder lacking the
    certificates stops before starting anything, naming the files and `whet auth certs`."""
    folder = tmp_path / "secrets"
    credentials.ensure_passwords(folder)
    config = tmp_path / "c.toml"
    config.write_text(f'[run]\nname = "t"\nruns_dir = "{tmp_path / "runs"}"\n'
                      f'[bus]\nurl = "{nats_server.url}"\n'
                      f'[auth]\nenabled = true\ntls = true\nsecrets_dir = "{folder}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHET_NATS_")}
    r = subprocess.run([sys.executable, "-m", "runtime.cli", "up", "--config", str(config)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert f"{folder / 'tls'}: no ca.pem, server.pem, server-key.pem" in r.stderr, r.stderr
    assert f"whet auth certs {folder}" in r.stderr
