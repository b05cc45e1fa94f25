"""What the docker backend and its warm pool share: the container side of a job's channels.

Consumes a slot's I/O folder on the host and a container handle; produces the FIFOs a job's
stdout, stderr, report and status channels flow through (`JobChannels`, mounted at `IO` in
the container) and the forced removal of a container. It starts no container and reads no
output (`sandbox.docker`, `sandbox.docker_pool` and `sandbox.pipes` do).
"""

from __future__ import annotations

import os
from pathlib import Path

import aiodocker
import structlog

from sandbox.pipes import close_quietly

log = structlog.get_logger("sandbox.docker")
IO = "/.whet"
"Where a job's channel FIFOs are mounted inside its container."
DRAIN_S = 2.0
"How long output may keep flowing after the job was killed."


class JobChannels:
    """Host side of a job's FIFOs: read ends, plus a held write end so EOF waits for us."""

    def __init__(self, io_dir: Path, uid: int, stdin: bytes) -> None:
        self.fds: list[int] = []
        for name in ("stdout", "stderr", "report", "status"):
            path = io_dir / name
            if not path.exists():
                os.mkfifo(path, 0o600)
            os.chown(path, uid, uid)
            read = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            # The status FIFO is not held: its EOF must mean "the wrapper is gone".
            hold = os.open(path, os.O_WRONLY | os.O_NONBLOCK) if name != "status" else -1
            self.fds += [read, hold]
        (io_dir / "stdin").write_bytes(stdin)
        os.chmod(io_dir / "stdin", 0o644)

    @property
    def read_fds(self) -> list[int]:
        return list(self.fds[0::2])

    def release(self) -> None:
        """Drop our write ends: readers see EOF once the container's writers are gone too."""
        self._close(range(1, len(self.fds), 2))

    def close(self) -> None:
        self._close(range(len(self.fds)))

    def _close(self, positions) -> None:
        # Each fd is closed once: a second close could hit a number reused meanwhile
        # (by the engine client's own socket, for one).
        for i in positions:
            if self.fds[i] >= 0:
                close_quietly(self.fds[i])
                self.fds[i] = -1


async def remove_container(container) -> None:
    """Force-remove a container; one already gone is not an error, other failures are logged."""
    try:
        await container.delete(force=True)
    except aiodocker.DockerError as exc:
        if exc.status != 404:
            log.warning("sandbox.container_remove_failed", container=container.id[:12], error=str(exc))
