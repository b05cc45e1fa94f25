"""`whet auth ...`: NATS users for a server whetstone does not start itself (compose).

Consumes a config file (roles of extra actor kinds) and a secrets folder; produces the
nats-server `authorization` block (and its `tls` block), password files, a CA with server
and per-role client certificates (`<secrets>/tls`), and the permission table as JSON.
Passwords are never printed: `server-config` either refers to environment variables or,
given a secrets folder, writes them into a file readable by its owner only. A typical
set-up: `register`; for a host that runs only workers, `whet auth export-worker ./secrets
./worker-secrets` (docs/multi-host.md).
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from runtime import config as config_mod
from runtime.broker import auth, certs
from runtime.cli.options import friendly
from runtime.stack import credentials

ConfigOpt = Annotated[Optional[Path], typer.Option(
    "--config", "-c", help="Config file whose [auth.roles] maps extra actor kinds.")]


def _auth_config(config: Path | None) -> auth.AuthConfig:
    return config_mod.load(config).auth if config else auth.AuthConfig()


def register(app: typer.Typer) -> None:
    """Add `whet auth` and its commands to `app`. Typical compose set-up:

        whet auth passwords ./secrets                       # one file per role, mode 0600
        whet auth server-config --secrets-dir ./secrets --out nats-auth.conf
        # nats service: `include nats-auth.conf` in its config; each actor service gets
        # WHET_NATS_USER=<role> and WHET_NATS_PASSWORD_FILE=/run/secrets/<role>

    With TLS across hosts (docs/operations.md, "TLS across hosts"):

        whet auth certs ./secrets --host nats.example.org --host 10.0.0.5
        whet auth server-config --secrets-dir ./secrets --tls-dir /etc/nats/tls --out nats-auth.conf
        # each actor also gets WHET_NATS_CA, WHET_NATS_CERT and WHET_NATS_KEY (its role's files)"""
    group = typer.Typer(no_args_is_help=True, help="NATS users and per-role permissions.")
    app.add_typer(group, name="auth")

    @group.command("passwords")
    @friendly
    def passwords(folder: Annotated[Path, typer.Argument(help="Folder for the password files.")]) -> None:
        """Create a random password file per role where one is missing (never printed)."""
        created = [r for r in auth.roles() if not (folder / r).exists()]
        credentials.ensure_passwords(folder)
        for role in auth.roles():
            state = "created" if role in created else "kept"
            typer.echo(f"{role:<10} {folder / role} ({state})")

    @group.command("certs")
    @friendly
    def make_certs(
        folder: Annotated[Path, typer.Argument(help="Secrets folder; the files go to FOLDER/tls.")],
        host: Annotated[Optional[list[str]], typer.Option(
            "--host", help="A name or IP address clients reach the server by (repeatable); "
                           "localhost, 127.0.0.1 and nats are always in.")] = None,
        renew: Annotated[bool, typer.Option(
            help="Remake the server and client certificates (the CA stays, so nothing "
                 "needs to trust anything new).")] = False,
        days: Annotated[int, typer.Option(min=1, help="Validity of the server and client "
                                                      "certificates.")] = certs.LEAF_DAYS,
    ) -> None:
        """A CA, a server certificate and one client certificate per role, where missing
        (keys mode 0600; never printed)."""
        now = datetime.datetime.now(datetime.timezone.utc)
        for made in certs.ensure(credentials.tls_dir(folder), host or [], renew=renew, days=days):
            late = " EXPIRED: remake with --renew" if made.expires <= now else ""
            typer.echo(f"{made.path} ({made.state}, expires {made.expires:%Y-%m-%d}){late}")

    @group.command("export-worker")
    @friendly
    def export_worker(
        folder: Annotated[Path, typer.Argument(help="The first host's secrets folder.")],
        out: Annotated[Path, typer.Argument(help="Folder to copy to the worker host.")],
        roles: Annotated[str, typer.Option(
            help="Comma-separated roles the worker host runs.")] = ",".join(credentials.WORKER_ROLES),
    ) -> None:
        """What a host running only workers needs (docs/multi-host.md): those roles'
        passwords, and with TLS the CA's certificate and their certificates and keys."""
        chosen = [r.strip() for r in roles.split(",") if r.strip()]
        for path in credentials.export_worker(folder, out, chosen):
            typer.echo(str(path))

    @group.command("server-config")
    @friendly
    def server_config(
        config: ConfigOpt = None,
        secrets_dir: Annotated[Optional[Path], typer.Option(
            help="Read passwords from these files and write them in (else: environment "
                 "variables WHET_NATS_PASSWORD_<ROLE>, read by the server).")] = None,
        out: Annotated[Optional[Path], typer.Option(help="Write here (mode 0600), not stdout.")] = None,
        tls_dir: Annotated[Optional[str], typer.Option(
            help="Require TLS and client certificates: the folder, as the server sees it, "
                 "with ca.pem, server.pem and server-key.pem from 'whet auth certs'.")] = None,
    ) -> None:
        """The nats-server `authorization` block for every role (and its `tls` block)."""
        cfg = _auth_config(config)
        passwords = credentials.read_passwords(secrets_dir) if secrets_dir else None
        text = auth.server_config(cfg, passwords) + auth.tls_config(cfg)
        if tls_dir:
            text += credentials.server_tls_block(Path(tls_dir))
        if out is None:
            if passwords is not None:
                raise typer.BadParameter("with --secrets-dir the block holds passwords: "
                                         "give --out FILE", param_hint="--out")
            typer.echo(text, nl=False)
            return
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        typer.echo(f"wrote {out}")

    @group.command("permissions")
    @friendly
    def permissions(role: Annotated[Optional[str], typer.Argument(help="One role (default: all).")] = None,
                    config: ConfigOpt = None) -> None:
        """What each role may publish and subscribe to, as JSON."""
        cfg = _auth_config(config)
        if role is not None and role not in auth.roles():
            raise typer.BadParameter(f"{role!r}: expected one of {auth.roles()}", param_hint="ROLE")
        chosen = [role] if role else auth.roles()
        typer.echo(json.dumps({r: auth.permissions(r, cfg) for r in chosen}, indent=2))
