"""The client side of NATS over TLS: the SSL context from files, and what a failed handshake means.

Consumes the CA, certificate and key file paths of `BusSettings`; produces an
`ssl.SSLContext` that trusts the CA and presents the client certificate, and for a refused
handshake a sentence that names the file at fault and how to make a new one. A missing or
unreadable file is a `TlsFailed` before any connection is tried. It makes no certificates
(`runtime.broker.certs` does) and configures no server.
"""

from __future__ import annotations

import logging
import re
import ssl
from pathlib import Path

from bus.errors import TlsFailed

class _QuietEof(logging.Filter):
    """asyncio warns on every close of a TLS connection that nats-py's protocol asks to keep
    its write side open after EOF; that is harmless and would fill every log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received() has no effect" not in record.getMessage()


_QUIET_EOF = _QuietEof()
REMAKE = "make them with 'whet auth certs <secrets folder>' (--renew replaces expired ones)"
NAME_MISMATCH = (62, 64)
"OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH."


def context(ca_file: str, cert_file: str, key_file: str) -> ssl.SSLContext | None:
    """Trust `ca_file` (else the system's CAs) and present `cert_file`; None when no file is
    named. TlsFailed names a file that is missing or not a PEM certificate or key."""
    if not (ca_file or cert_file or key_file):
        return None
    logging.getLogger("asyncio").addFilter(_QUIET_EOF)  # once: a filter is added once
    if bool(cert_file) != bool(key_file):
        raise TlsFailed(f"a client certificate needs both WHET_NATS_CERT and WHET_NATS_KEY "
                        f"(got certificate {cert_file or '-'}, key {key_file or '-'})")
    for path, what in ((ca_file, "CA certificate"), (cert_file, "client certificate"),
                       (key_file, "client key")):
        if path and not Path(path).is_file():
            raise TlsFailed(f"{what} {path}: no such file; {REMAKE}")
    try:
        ctx = ssl.create_default_context(cafile=ca_file or None)
    except ssl.SSLError as exc:
        raise TlsFailed(f"CA certificate {ca_file}: not a PEM certificate ({exc.reason})") from None
    if cert_file:
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except ssl.SSLError as exc:
            raise TlsFailed(f"client certificate {cert_file} with key {key_file}: not a PEM "
                            f"certificate and its key ({exc.reason}); {REMAKE}") from None
    return ctx


def is_refusal(exc: ssl.SSLError) -> bool:
    """True if one side refused the other's certificate (retrying cannot help); a handshake
    cut short by a restarting server is not one."""
    return isinstance(exc, ssl.SSLCertVerificationError) or "ALERT" in (exc.reason or "")


def explain(exc: ssl.SSLError, url: str, ca_file: str, cert_file: str) -> str:
    """Why the TLS handshake with `url` failed, naming the file at fault (or the name the
    server's certificate lacks, and the `--host` that adds it)."""
    reason = exc.reason or str(exc)
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_code in NAME_MISMATCH:
        named = re.search(r"not valid for '([^']+)'", exc.verify_message or "")
        host = named[1] if named else "the host this client dials"
        return (f"the server's certificate (at {url}) does not name {host}, which this client "
                f"dials: remake it with 'whet auth certs <secrets folder> --renew --host {host}' "
                f"and a --host for every other name clients reach a server by (nats-2 and nats-3 "
                f"too for the compose cluster), then restart the server")
    if isinstance(exc, ssl.SSLCertVerificationError):
        trusted = ca_file or "the system's CAs"
        return (f"the server's certificate at {url} is not trusted by {trusted}: "
                f"{exc.verify_message}; give WHET_NATS_CA the CA that signed it, or {REMAKE}")
    if reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED":
        return (f"the server at {url} requires a client certificate: set WHET_NATS_CERT and "
                f"WHET_NATS_KEY to your role's; {REMAKE}")
    if reason == "SSLV3_ALERT_CERTIFICATE_EXPIRED":
        return f"the server at {url} refused the client certificate {cert_file}: it has expired; {REMAKE}"
    if reason in ("TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_BAD_CERTIFICATE"):
        return (f"the server at {url} refused the client certificate {cert_file or '(none)'}: "
                f"not signed by the server's CA ({reason}); {REMAKE}")
    return f"TLS with {url} failed: {reason}; check WHET_NATS_CA, WHET_NATS_CERT, WHET_NATS_KEY"
