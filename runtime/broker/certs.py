"""whetstone's own certificate authority for NATS over TLS across hosts.

Consumes a folder (`<secrets>/tls`), the names and addresses the server is reached by, and
the roles of `runtime.broker.auth`; produces, where missing, PEM files (keys mode 0600; the
files: `ensure`). One client certificate per role, not one shared: a host or container gets
only the key of the role it runs, and a leaked key is replaced by renewing that role's files
alone. The server requires a client certificate signed by the CA (`verify: true`); users and
their permissions still come from the per-role passwords. Keys are ECDSA P-256.
It does not configure the server or the clients (`runtime.broker.auth.tls_config`,
`runtime.stack.credentials` do). Needs the `cryptography` package (the `tls` extra).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from bus.errors import RunError
from runtime.broker import auth

CA, SERVER = "ca", "server"
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "nats")
"Every server certificate covers these: this host, and the compose service name."
CA_DAYS = 3650
LEAF_DAYS = 365


@dataclass(frozen=True)
class Made:
    """One certificate file and what happened to it."""

    path: Path
    state: str
    "created, renewed or kept"
    expires: datetime.datetime


def cert_path(folder: Path, name: str) -> Path:
    """The certificate file of `name` in `folder` (`<name>.pem`)."""
    return folder / f"{name}.pem"


def key_path(folder: Path, name: str) -> Path:
    """The key file of `name` in `folder` (`<name>-key.pem`)."""
    return folder / f"{name}-key.pem"


def regenerate_hint(folder: Path) -> str:
    """The command that makes (or, with --renew, replaces) the files of `folder`."""
    secrets = folder.parent if folder.name == "tls" else folder
    return f"make them with 'whet auth certs {secrets}' (add --renew to replace expired ones)"


def missing(folder: Path, roles: list[str]) -> list[Path]:
    """The files a TLS set-up with `roles` needs that `folder` lacks."""
    names = [CA, SERVER, *roles]
    wanted = [cert_path(folder, CA)] + [p for n in names[1:]
                                        for p in (cert_path(folder, n), key_path(folder, n))]
    return [p for p in wanted if not p.is_file()]


def require(folder: Path) -> None:
    """RunError naming every file a client or the server would miss."""
    lacking = missing(folder, auth.roles())
    if lacking:
        raise RunError(f"{folder}: no {', '.join(p.name for p in lacking)}; "
                       + regenerate_hint(folder))


def ensure(folder: Path, hosts: list[str] = (), renew: bool = False,
           days: int = LEAF_DAYS) -> list[Made]:
    """The CA, the server's and every role's certificate in `folder`, made where missing
    or not signed by this CA (with `renew`, every one but the CA is remade):

        ca.pem, ca-key.pem              the CA (its key never leaves the host that made it)
        server.pem, server-key.pem      the server, with a SAN per name and address
        <role>.pem, <role>-key.pem      one client certificate per role (CN = the role)

    A kept server certificate that lacks one of `hosts` is a RunError: renewing it is the fix;
    so is a certificate to make where the CA's key is not (a host that was given only ca.pem)."""
    _cryptography()
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    ca_cert, ca_key = cert_path(folder, CA), key_path(folder, CA)
    if ca_cert.is_file():
        made = [Made(ca_cert, "kept", _expires(ca_cert))]
    else:
        _write_pair(folder, CA, *_make_ca())
        made = [Made(ca_cert, "created", _expires(ca_cert))]
    ca = _load(ca_cert)
    names = list(dict.fromkeys([*DEFAULT_HOSTS, *hosts]))
    for name in [SERVER, *auth.roles()]:
        path = cert_path(folder, name)
        exists = path.is_file() and key_path(folder, name).is_file()
        if exists and not renew and _signed_by(path, ca):
            if name == SERVER:
                _check_covers(path, names)
            made.append(Made(path, "kept", _expires(path)))
            continue
        if not ca_key.is_file():
            raise RunError(f"{ca_key}: missing, so {path.name} cannot be made here; run "
                           f"'whet auth certs' where the CA's key is and copy the files over")
        leaf = _make_leaf((ca, _load_key(ca_key)), name, names if name == SERVER else None, days)
        _write_pair(folder, name, *leaf)
        made.append(Made(path, "renewed" if exists else "created", _expires(path)))
    return made


def _signed_by(path: Path, ca) -> bool:
    """True if the certificate at `path` names `ca`'s key as its issuer's."""
    from cryptography import x509

    try:
        aki = _load(path).extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    except x509.ExtensionNotFound:
        return False
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return aki.key_identifier == ski.digest


def _cryptography():
    try:
        from cryptography import x509
    except ImportError:
        raise RunError("making certificates needs the 'cryptography' package: "
                       "pip install 'whetstone[tls]'") from None
    return x509


def _make_ca():
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "whetstone CA")])
    usage = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, encipher_only=False,
                          decipher_only=False)
    builder = (_base(name, name, key.public_key(), CA_DAYS)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(usage, critical=True))
    return _sign(builder, key), key


def _make_leaf(ca, name: str, hosts: list[str] | None, days: int):
    """A server certificate (`hosts` as SANs) or a client certificate for role `name`."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, name)])
    usage = x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, encipher_only=False,
                          decipher_only=False)
    purpose = x509.ExtendedKeyUsageOID.SERVER_AUTH if hosts else x509.ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (_base(subject, ca_cert.subject, key.public_key(), days)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(usage, critical=True)
               .add_extension(x509.ExtendedKeyUsage([purpose]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   ca_key.public_key()), critical=False))
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
    return _sign(builder, ca_key), key


def _base(subject, issuer, public_key, days: int):
    from cryptography import x509

    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False))


def _sign(builder, key):
    from cryptography.hazmat.primitives import hashes

    return builder.sign(key, hashes.SHA256())


def _san(host: str):
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write_pair(folder: Path, name: str, cert, key) -> None:
    from cryptography.hazmat.primitives import serialization

    key_bytes = key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    _write(key_path(folder, name), key_bytes, 0o600)
    _write(cert_path(folder, name), cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _load_key(path: Path):
    from cryptography.hazmat.primitives import serialization

    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def _load(path: Path):
    from cryptography import x509

    return x509.load_pem_x509_certificate(path.read_bytes())


def _expires(path: Path) -> datetime.datetime:
    return _load(path).not_valid_after_utc


def _check_covers(path: Path, hosts: list[str]) -> None:
    from cryptography import x509

    sans = _load(path).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    covered = {str(v) for v in sans.get_values_for_type(x509.DNSName)}
    covered |= {str(v) for v in sans.get_values_for_type(x509.IPAddress)}
    lacking = [h for h in hosts if str(_san(h).value) not in covered]
    if lacking:
        raise RunError(f"{path} does not cover {', '.join(lacking)} (it covers "
                       f"{', '.join(sorted(covered))}); remake it with 'whet auth certs "
                       f"{path.parent.parent} --renew' and a --host for every name it needs")
