"""Durability is a setting: the embedded server runs with the configured JetStream sync
interval, as the server itself reports; a bad interval never reaches it."""

from __future__ import annotations

import json
import urllib.request

import pytest

from bus.errors import RunError
from runtime.broker.embedded import EmbeddedServer
from runtime.config import load


def jetstream_config(server: EmbeddedServer) -> dict:
    """The server's own view of its JetStream settings (/varz)."""
    with urllib.request.urlopen(f"{server.monitoring_url}/varz", timeout=5) as r:
        return json.loads(r.read())["jetstream"]["config"]


@pytest.mark.bus
@pytest.mark.parametrize("interval, always, nanoseconds", [
    ("always", True, None), ("10s", False, 10 * 10**9), ("2m", False, 120 * 10**9)])
def test_embedded_server_flushes_as_configured(tmp_path, interval, always, nanoseconds):
    """Started with sync_interval "always" the server fsyncs every write; with a duration it
    flushes at that interval ("2m", the default, is NATS's own)."""
    server = EmbeddedServer(tmp_path / "nats", max_file_store_mb=64, sync_interval=interval,
                            monitor=True)
    server.start()
    try:
        js = jetstream_config(server)
    finally:
        server.kill()
    assert js.get("sync_always", False) is always
    if nanoseconds is not None:
        assert js["sync_interval"] == nanoseconds


@pytest.mark.unit
def test_the_default_config_keeps_nats_default_and_always_loads(tmp_path):
    """`[bus] sync_interval` defaults to "2m"; "always" and durations such as "1h30m" load."""
    path = tmp_path / "c.toml"
    path.write_text("")
    assert load(path).bus.sync_interval == "2m"
    for value in ("always", "1h30m", "500ms"):
        path.write_text(f'[bus]\nsync_interval = "{value}"\n')
        assert load(path).bus.sync_interval == value


@pytest.mark.bus
def test_a_bad_interval_never_reaches_a_server(tmp_path):
    """The embedded server refuses an interval nats-server would misread ("2 m") before
    writing its config."""
    with pytest.raises(RunError, match="sync interval"):
        EmbeddedServer(tmp_path / "nats", sync_interval="2 m")
    assert not (tmp_path / "nats").exists()
