"""Turn a `RunConfig` and the environment into bus settings and topology.

Consumes the config and credential variables; produces `BusSettings` and the stream list.
Credentials come only from the environment (or files it names), never from config files
in the repository:

- `WHET_NATS_USER` and `WHET_NATS_PASSWORD`, or `WHET_NATS_PASSWORD_FILE`;
- `WHET_NATS_TOKEN`;
- `WHET_NATS_CREDS` (a .creds file);
- `WHET_NATS_CA` (a CA bundle, which turns TLS on);
- `WHET_NATS_CERT` and `WHET_NATS_KEY` (a client certificate and its key, for a server that
  requires one: `[auth] tls`, made by `whet auth certs`).
"""

from __future__ import annotations

import os
from pathlib import Path

from bus import subjects
from bus.nats_bus import BusSettings
from runtime.config import RunConfig


def bus_settings(cfg: RunConfig, url: str) -> BusSettings:
    """Settings to reach `url` with the run's timeouts and the environment's credentials."""
    password = os.environ.get("WHET_NATS_PASSWORD", "")
    password_file = os.environ.get("WHET_NATS_PASSWORD_FILE")
    if password_file:
        password = Path(password_file).read_text().strip()
    b = cfg.bus
    return BusSettings(
        url=url,
        user=os.environ.get("WHET_NATS_USER", ""),
        password=password,
        token=os.environ.get("WHET_NATS_TOKEN", ""),
        creds_file=os.environ.get("WHET_NATS_CREDS", ""),
        tls_ca_file=os.environ.get("WHET_NATS_CA", ""),
        tls_cert_file=os.environ.get("WHET_NATS_CERT", ""),
        tls_key_file=os.environ.get("WHET_NATS_KEY", ""),
        request_timeout_s=b.request_timeout_s,
        publish_deadline_s=b.publish_deadline_s,
        ack_wait_s=b.ack_wait_s,
        max_deliver=b.max_deliver,
        duplicate_window_s=b.duplicate_window_s,
        max_ack_pending=b.max_ack_pending,
        replicas=b.replicas,
    )


def topology(cfg: RunConfig) -> list[subjects.StreamSpec]:
    """The streams this run needs, sized from its config."""
    return subjects.streams(
        work_max_bytes=cfg.bus.work_max_mb * 1024 * 1024,
        retention_s=cfg.bus.retention_h * 3600,
        events_max_bytes=cfg.bus.events_max_mb * 1024 * 1024,
        verdicts_max_bytes=cfg.bus.verdicts_max_mb * 1024 * 1024,
        trials_max_age_s=cfg.monitor.trials_retention_h * 3600,
        trials_max_bytes=cfg.monitor.trials_max_mb * 1024 * 1024,
    )
