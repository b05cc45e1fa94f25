"""Rank 0's handle on the learner's DeepSpeed ranks.

Consumes the trainer's config (`policy.config.TrainerConfig`) and a checkpoint folder; produces `world_size - 1` child processes
(`python -m policy.rank_main`), each running a `Trainer`, plus the rank-0 `Trainer` in this
process. `call(op, *args)` broadcasts the operation to the children and runs it here, in a
worker thread so the actor's event loop (heartbeats, acks) keeps running; all ranks thus
run the same collective operations in the same order. Children die with this process.

It does not decide what to train; the learner actor does.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
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


class RankGroup:
    def __init__(self, config: TrainerConfig, checkpoint_dir: Path) -> None:
        self.config = config
        self.dir = Path(checkpoint_dir)
        self.world = config.learner.world_size
        self.children: list[subprocess.Popen] = []
        self.trainer: Trainer | None = None
        self.vocab_size = 0

    async def start(self) -> dict:
        """Start the ranks and build every engine; returns the resumed client state ({} if fresh)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(self.world)}
        os.environ.update(env, RANK="0", LOCAL_RANK="0")
        if self.world > 1:
            config_file = self.dir / "trainer-config.json"
            config_file.write_bytes(msgspec.json.encode(self.config))
            for rank in range(1, self.world):
                self.children.append(subprocess.Popen(
                    [sys.executable, "-m", "policy.rank_main", "--config", str(config_file),
                     "--checkpoint-dir", str(self.dir)],
                    env={**os.environ, **env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                    stdin=subprocess.DEVNULL))
        self.trainer = Trainer(self.config, self.dir)
        state = await anyio.to_thread.run_sync(self.trainer.setup)
        self.vocab_size = self.trainer.vocab_size
        log.info("learner.ranks_started", world_size=self.world, device=self.config.learner.device)
        return state

    def _run(self, op: str, args: tuple) -> Any:
        assert self.trainer is not None
        if self.world > 1:
            broadcast_op(op, args)
        return getattr(self.trainer, op)(*args)

    async def call(self, op: str, *args: Any) -> Any:
        """Run `op` on every rank; returns rank 0's result. Not cancellable midway."""
        with anyio.CancelScope(shield=True):
            return await anyio.to_thread.run_sync(self._run, op, args)

    async def close(self) -> None:
        """Stop the children (they leave their loop on 'stop') and leave the process group."""
        if self.trainer is not None:
            with anyio.CancelScope(shield=True):
                if self.world > 1:
                    await anyio.to_thread.run_sync(broadcast_op, "stop", ())
                await anyio.to_thread.run_sync(self.trainer.close)
        for child in self.children:
            try:
                await anyio.to_thread.run_sync(child.wait, 30)
            except subprocess.TimeoutExpired:
                child.kill()
