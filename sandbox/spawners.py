"""Host side of the slot spawners (`sandbox/spawner.py`): one per slot, started on first use.

Consumes a slot index and a job's spawn request with its five fds; produces a started
launcher (setpriv + bubblewrap) born inside the slot's cgroup. A spawner that died is
started again on the next job of its slot. It does NOT watch jobs: the local backend reads
bubblewrap's status pipe for that.
"""

from __future__ import annotations

import array
import json
import socket
from pathlib import Path

import anyio
import structlog

from sandbox.launch import spawner_argv

log = structlog.get_logger("sandbox.spawners")
SCRIPT = Path(__file__).with_name("spawner.py")
START_TIMEOUT_S = 30.0


class SlotSpawners:
    """The host side of each slot's spawner (`sandbox/spawner.py`), started on first use."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.procs: dict[int, tuple[object, socket.socket, int]] = {}
        self.locks: dict[int, anyio.Lock] = {}

    async def _get(self, index: int) -> socket.socket:
        held = self.procs.get(index)
        if held is not None and held[0].returncode is None:
            return held[1]
        async with self.locks.setdefault(index, anyio.Lock()):
            await self._stop(index)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            request = self.request_file(index)
            argv = spawner_argv(self.backend.slot(index), str(SCRIPT), theirs.fileno(), str(request))
            proc = await anyio.open_process(argv, stdin=None, stdout=None, stderr=None,
                                            pass_fds=(theirs.fileno(),), start_new_session=True)
            theirs.close()
            ours.setblocking(False)
            try:
                with anyio.fail_after(START_TIMEOUT_S):
                    await anyio.wait_readable(ours)
                    hello = ours.recv(64).split()
            except (OSError, TimeoutError):
                hello = []
            if hello[:1] != [b"ready"]:
                proc.kill()
                raise RuntimeError(f"the spawner of slot {index} did not start (said {hello!r})")
            pid = int(hello[1])
            self.backend.cgroups[index].keep.add(pid)
            self.procs[index] = (proc, ours, pid)
            return ours

    def request_file(self, index: int) -> Path:
        return self.backend.root / f"slot{index}.spawn.json"

    async def launch(self, index: int, request: dict, fds: list[int]) -> None:
        """Have slot `index`'s spawner start `request` with `fds` at 0-4."""
        sock = await self._get(index)
        path = self.request_file(index)
        path.write_text(json.dumps(request))
        path.chmod(0o600)
        try:
            sock.sendmsg([b"go"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        except OSError as exc:
            await self._stop(index)
            raise RuntimeError(f"the spawner of slot {index} is gone: {exc!r}") from exc

    async def _stop(self, index: int) -> None:
        held = self.procs.pop(index, None)
        if held is None:
            return
        proc, sock, pid = held
        sock.close()
        self.backend.cgroups[index].keep.discard(pid)
        if proc.returncode is None:
            proc.kill()
        with anyio.CancelScope(shield=True):
            await proc.wait()

    async def aclose(self) -> None:
        for index in list(self.procs):
            await self._stop(index)
