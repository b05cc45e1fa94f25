"""Rank 0's handle on the learner's DeepSpeed ranks, and the loop every other rank runs.

Consumes the trainer's config (`policy.config.TrainerConfig`) and a checkpoint folder;
produces the rank-0 `Trainer` in this process and, by `[learner] ranks`:
- children: `world_size - 1` child processes (`python -m policy.rank_main`) on this host,
  meeting at a local port; they die with this process;
- bus: no processes; ranks of their own (`actors.learner_rank`) meet this one through the
  bus (`policy.rendezvous`), and `watch_peers` raises `PeerLost` when one is replaced.
`call(op, *args)` broadcasts the operation to the other ranks and runs it here, in a thread
so the actor's event loop (heartbeats, acks) keeps running; all ranks thus run the same
collective operations in the same order (`follow` is the other side).

It does not decide what to train; the learner actor does.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import anyio
import anyio.lowlevel
import msgspec
import structlog

from policy.config import TrainerConfig
from policy.trainer import Trainer

log = structlog.get_logger("policy.ranks")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def broadcast_op(op: str, args: tuple) -> tuple[str, tuple]:
    """Send (op, args) from rank 0 to every rank, or receive it elsewhere."""
    import torch.distributed as dist

    box = [(op, args)]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def follow(trainer: Trainer, join: Callable[[str], None] | None = None) -> None:
    """A rank other than 0: set up, then run rank 0's operations until 'stop'."""
    trainer.setup(join)
    while True:
        op, op_args = broadcast_op("", ())
        if op == "stop":
            trainer.close()
            return
        getattr(trainer, op)(*op_args)


async def in_daemon_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a daemon thread of its own. If the caller is cancelled, the thread is
    left behind: a collective stuck on a lost peer cannot be interrupted, and a daemon
    thread does not keep the process from exiting (anyio's worker threads would)."""
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            box["error"] = exc
        try:
            anyio.from_thread.run_sync(done.set, token=token)
        except RuntimeError:
            pass  # the event loop is gone: the process is leaving

    threading.Thread(target=work, name=f"learner-{getattr(fn, '__name__', 'op')}",
                     daemon=True).start()
    await done.wait()
    if "error" in box:
        raise box["error"]
    return box.get("value")


class RankGroup:
    """The learner's DeepSpeed ranks as rank 0 sees them: started, called in step, closed."""

    def __init__(self, config: TrainerConfig, checkpoint_dir: Path, bus: Any = None) -> None:
        self.config = config
        self.dir = Path(checkpoint_dir)
        self.world = config.learner.world_size
        self.bus = bus
        "The bus the ranks meet through (`ranks = 'bus'`)."
        self.meeting: Any = None
        self.children: list[subprocess.Popen] = []
        self.trainer: Trainer | None = None
        self.vocab_size = 0
        self.broken = False
        "An operation was left unfinished: the ranks are out of step and must not meet again."

    @property
    def on_bus(self) -> bool:
        return self.world > 1 and self.config.learner.ranks == "bus"

    async def start(self) -> dict:
        """Start the ranks and build every engine; returns the resumed client state ({} if fresh;
        `policy.checkpoint.LearnerState.from_client` reads it)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        join = None
        if self.on_bus:
            from policy.rendezvous import open_meeting

            self.meeting = await open_meeting(self.bus, self.config.learner)
            os.environ.update(self.meeting.env())
            join = self.meeting.join
        else:
            self._spawn_children()
        self.trainer = Trainer(self.config, self.dir)
        state = await self._blocking(self.trainer.setup, join)
        self.vocab_size = self.trainer.vocab_size
        log.info("learner.ranks_started", world_size=self.world, device=self.config.learner.device,
                 ranks=self.config.learner.ranks,
                 generation=self.meeting.generation if self.meeting else 0)
        return state

    def _spawn_children(self) -> None:
        port = free_port()
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(self.world)}
        os.environ.update(env, RANK="0", LOCAL_RANK="0")
        if self.world == 1:
            return
        config_file = self.dir / "trainer-config.json"
        config_file.write_bytes(msgspec.json.encode(self.config))
        for rank in range(1, self.world):
            self.children.append(subprocess.Popen(
                [sys.executable, "-m", "policy.rank_main", "--config", str(config_file),
                 "--checkpoint-dir", str(self.dir)],
                env={**os.environ, **env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                stdin=subprocess.DEVNULL))

    async def watch_peers(self) -> None:
        """Ranks on the bus: raise `PeerLost` once a rank of this generation is replaced.
        Returns at once otherwise (children die with this process)."""
        if not self.on_bus:
            return
        from policy.rendezvous import seated, watch_seats

        await watch_seats(self.bus, self.meeting, await seated(self.bus, self.meeting))

    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a collective off the event loop. Children: never cancelled midway (the ranks
        stay in step). Bus: cancellable (a lost peer may never answer); an operation left
        unfinished marks the group broken."""
        if not self.on_bus:
            with anyio.CancelScope(shield=True):
                return await anyio.to_thread.run_sync(fn, *args)
        finished = False
        try:
            value = await in_daemon_thread(fn, *args)
            finished = True
            return value
        finally:
            self.broken = self.broken or not finished

    def _run(self, op: str, args: tuple) -> Any:
        assert self.trainer is not None
        if self.world > 1:
            broadcast_op(op, args)
        return getattr(self.trainer, op)(*args)

    async def call(self, op: str, *args: Any) -> Any:
        """Run `op` on every rank; returns rank 0's result."""
        return await self._blocking(self._run, op, args)

    async def close(self) -> None:
        """Stop the other ranks (they leave their loop on 'stop') and leave the process group;
        a broken group is left as it is (this process is on its way out)."""
        if self.trainer is not None and not self.broken:
            with anyio.CancelScope(shield=True):
                try:
                    if self.world > 1:
                        await self._blocking(broadcast_op, "stop", ())
                    await self._blocking(self.trainer.close)
                except Exception as exc:  # noqa: BLE001 - a peer already gone
                    log.warning("learner.ranks_close_failed", error=str(exc).splitlines()[0])
        for child in self.children:
            try:
                await anyio.to_thread.run_sync(child.wait, 30)
            except subprocess.TimeoutExpired:
                child.kill()
