"""Per-role NATS passwords: generated per run or read from files, handed out through the
environment, never written to the repository or logged.

Consumes the `[auth]` section, a secrets folder (one file per role) and bus settings;
produces password files (mode 0600 in a 0700 folder), the environment a supervised actor
gets (`WHET_NATS_USER`, `WHET_NATS_PASSWORD_FILE`, `WHET_NATS_CA`, with `[auth] tls` its
role's `WHET_NATS_CERT` and `WHET_NATS_KEY`), and admin bus settings for the stack and the
CLI. Secrets travel as file paths, never values, so no process listing shows them. It
decides no permissions (`runtime.broker.auth`) and makes no certificates
(`runtime.broker.certs`). For a worker-only host it copies those roles' files to a folder.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from pathlib import Path

from bus.errors import RunError
from bus.nats_bus import BusSettings
from runtime.broker import auth, certs
from runtime.config import RunConfig
from runtime.stack.rundir import RunDir


def secrets_dir(cfg: RunConfig, run_dir: RunDir | None) -> Path | None:
    """Where the role password files of this run are, or None when auth is off."""
    if not cfg.auth.enabled:
        return None
    if cfg.auth.secrets_dir:
        return Path(cfg.auth.secrets_dir)
    return run_dir.path / "secrets" if run_dir is not None else None


def tls_dir(folder: Path) -> Path:
    """Where the CA and the certificates of `[auth] tls` are: `<secrets>/tls`."""
    return folder / "tls"


def role_tls(folder: Path, role: str) -> dict[str, str]:
    """The CA, certificate and key files `role` connects with, as environment variables."""
    d = tls_dir(folder)
    return {"WHET_NATS_CA": str(certs.cert_path(d, certs.CA)),
            "WHET_NATS_CERT": str(certs.cert_path(d, role)),
            "WHET_NATS_KEY": str(certs.key_path(d, role))}


def server_tls_block(folder: Path) -> str:
    """The `tls` block for the server files of `whet auth certs` in `folder` (a path as the
    server sees it): TLS and a client certificate of the CA required."""
    return auth.tls_block(str(certs.cert_path(folder, certs.SERVER)),
                          str(certs.key_path(folder, certs.SERVER)), str(certs.cert_path(folder, certs.CA)))


def ensure_passwords(folder: Path) -> dict[str, str]:
    """Every role's password, creating a fresh random one where its file is missing."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    out = {}
    for role in auth.roles():
        path = folder / role
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(24) + "\n")
        out[role] = path.read_text().strip()
    return out


def read_passwords(folder: Path) -> dict[str, str]:
    """Every role's password from existing files; RunError names the missing ones."""
    missing = [role for role in auth.roles() if not (folder / role).is_file()]
    if missing:
        raise RunError(f"{folder}: no password file for role(s) {', '.join(missing)}; create "
                       f"them with 'whet auth passwords {folder}'")
    return {role: (folder / role).read_text().strip() for role in auth.roles()}


WORKER_ROLES = ("generator", "executor", "judge")
"The roles a worker host runs (docker-compose.workers.yml)."


def export_worker(folder: Path, out: Path, roles: list[str]) -> list[Path]:
    """Copy what a host running only `roles` needs from the secrets `folder` into `out`
    (0700, files 0600): their password files and, where `folder` has TLS files, the CA's
    certificate and their certificates and keys. Never admin, the CA's key, the server's
    files or the NATS users block. RunError names a bad role or a missing file first."""
    bad = [r for r in roles if r not in auth.roles() or r == auth.ADMIN]
    if bad or not roles:
        allowed = ", ".join(r for r in auth.roles() if r != auth.ADMIN)
        raise RunError(f"roles {', '.join(bad) or '(none)'}: a worker host may get only "
                       f"these roles: {allowed}")
    if out.resolve() == folder.resolve():
        raise RunError(f"{out}: the export must go to another folder than the secrets it "
                       "copies from")
    wanted = {out / r: folder / r for r in roles}
    tls = tls_dir(folder)
    if certs.cert_path(tls, certs.CA).is_file():
        names = [(certs.cert_path, certs.CA)] + [(f, r) for r in roles
                                                for f in (certs.cert_path, certs.key_path)]
        wanted.update({f(tls_dir(out), n): f(tls, n) for f, n in names})
    lacking = [str(src) for src in wanted.values() if not src.is_file()]
    if lacking:
        raise RunError(f"no {', '.join(lacking)}; make them with 'whet auth passwords "
                       f"{folder}' (and 'whet auth certs {folder}' for TLS)")
    for dest, src in wanted.items():
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.parent.chmod(0o700)
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(src.read_bytes())
    return list(wanted)


def embedded_server_config(cfg: RunConfig, folder: Path | None) -> str:
    """Extra config for the embedded server: users with fresh passwords, and TLS if set
    (with `[auth] tls`, the CA and certificates are made where missing)."""
    text = auth.tls_config(cfg.auth)
    if folder is not None and cfg.auth.tls:
        certs.ensure(tls_dir(folder))
        text += server_tls_block(tls_dir(folder))
    if folder is not None:
        text += auth.server_config(cfg.auth, ensure_passwords(folder))
    return text


def require_external(cfg: RunConfig, folder: Path | None) -> None:
    """RunError now, not in every actor, when the files for another server are missing."""
    if folder is None:
        return
    read_passwords(folder)
    if cfg.auth.tls:
        certs.require(tls_dir(folder))


_LOGIN_VARS = ("WHET_NATS_USER", "WHET_NATS_PASSWORD", "WHET_NATS_PASSWORD_FILE",
               "WHET_NATS_TOKEN", "WHET_NATS_CREDS", "WHET_NATS_CERT", "WHET_NATS_KEY")


def actor_env(kind: str, cfg: RunConfig, folder: Path | None,
              base: dict[str, str]) -> dict[str, str]:
    """`base` environment for a supervised actor of `kind`, logged in as its role."""
    env = dict(base)
    if folder is not None:
        for var in _LOGIN_VARS:  # the supervisor's own login must not leak to its children
            env.pop(var, None)
        role = auth.role_of(kind, cfg.auth)
        env.update(WHET_NATS_USER=role, WHET_NATS_PASSWORD_FILE=str(folder / role))
        if cfg.auth.tls:
            env.update(role_tls(folder, role))
    if cfg.auth.tls_cert_file and not env.get("WHET_NATS_CA"):
        env["WHET_NATS_CA"] = cfg.auth.tls_cert_file  # a self-signed certificate is its own CA
    return env


def as_admin(settings: BusSettings, cfg: RunConfig, folder: Path | None) -> BusSettings:
    """`settings` logged in as admin from `folder` (when the environment names no user),
    trusting the embedded server's certificate (when the environment names no CA), and with
    `[auth] tls` presenting admin's certificate (when the environment names none)."""
    changes: dict[str, str] = {}
    has_login = settings.user or settings.token or settings.creds_file
    if folder is not None and not has_login and (folder / auth.ADMIN).is_file():
        changes.update(user=auth.ADMIN, password=(folder / auth.ADMIN).read_text().strip())
    if cfg.auth.tls_cert_file and not settings.tls_ca_file:
        changes["tls_ca_file"] = cfg.auth.tls_cert_file
    if folder is not None and cfg.auth.tls and not settings.tls_cert_file:
        files = role_tls(folder, auth.ADMIN)
        changes.update(tls_ca_file=files["WHET_NATS_CA"], tls_cert_file=files["WHET_NATS_CERT"],
                       tls_key_file=files["WHET_NATS_KEY"])
    return dataclasses.replace(settings, **changes) if changes else settings
