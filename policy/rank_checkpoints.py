"""One learner rank's share of its DeepSpeed checkpoints: the tag to resume, saves that every
rank agrees on, pruning and discarding.

Consumes the rank's DeepSpeed engine, its checkpoint folder and `[learner]`; produces
checkpoint folders (`step…`) and rank 0's `latest` pointer, written only once every rank wrote
its part. With `ranks = "bus"` each rank keeps its own folder in full (node-local storage).
Every method that talks to other ranks is collective: all ranks call it in the same order.
It does NOT decide when to save or what the client state holds (`policy.checkpoint`).
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

import structlog

from policy.config import LearnerConfig

log = structlog.get_logger("learner")


class RankCheckpoints:
    """Checkpoints in `folder` as rank `rank` of `world` sees them."""

    def __init__(self, folder: Path, rank: int, world: int, lc: LearnerConfig) -> None:
        self.dir = folder
        self.rank = rank
        self.world = world
        self.lc = lc

    def agreed_tag(self) -> str | None:
        """The tag rank 0's `latest` names (None if it has none), on every rank."""
        latest = self.dir / "latest"
        tag = latest.read_text().strip() if self.rank == 0 and latest.exists() else None
        if self.world > 1:
            import torch.distributed as dist

            box = [tag]
            dist.broadcast_object_list(box, src=0)
            tag = box[0]
        return tag

    def check_kind(self, tag: str) -> None:
        """ConfigError when checkpoint `tag` holds adapters and LoRA is off, or the reverse."""
        from bus.errors import ConfigError
        from policy.export import checkpoint_holds_adapter

        held = checkpoint_holds_adapter(self.dir / tag)
        if held is None or held == (self.lc.lora is not None):
            return
        raise ConfigError(str(self.dir / tag), "learner.lora",
                          f"this checkpoint holds {'LoRA adapters' if held else 'full weights'} "
                          f"but [learner] lora is {'off' if held else 'on'}: resume with the "
                          "setting it was trained with, or start afresh with an empty "
                          "checkpoint folder")

    def save(self, engine: Any, tag: str, client_state: dict) -> None:
        """Write checkpoint `tag` of `engine` with `client_state`; once every rank wrote its
        part, rank 0 points `latest` at it. Keeps the newest `keep_checkpoints`."""
        # DeepSpeed would write `latest` before every rank is done; it returns after a barrier.
        try:
            engine.save_checkpoint(str(self.dir), tag=tag, client_state=client_state,
                                   save_latest=False,
                                   exclude_frozen_parameters=self.lc.lora is not None)
            failure = None
        except Exception as exc:  # noqa: BLE001 - the ranks must agree first (`_agree`)
            if self.world == 1:
                raise
            failure = exc
        if self.world > 1 and not self._agree(tag, failure):
            return
        if self.rank == 0:
            partial = self.dir / "latest.partial"
            partial.write_text(tag)
            partial.replace(self.dir / "latest")
            self._prune(tag, self.lc.keep_checkpoints)
        elif self.lc.ranks == "bus":
            # One more here: rank 0 may die before `latest` names this tag, and then resumes
            # from the one before.
            self._prune(tag, self.lc.keep_checkpoints + 1)

    def _agree(self, tag: str, failure: Exception | None) -> bool:
        """Whether every rank wrote its part of checkpoint `tag`. A rank whose write failed
        meets the others at the barrier that ends their save, then all share the worst
        outcome (0 written, 1 a full disk, 2 another error): rank 0 raises it (its own
        exception, or ENOSPC for another rank's full disk), the others return False and wait
        for rank 0's next operation (a `discard`), so the ranks stay in step."""
        import deepspeed.comm as dist
        import torch

        from policy.disk import is_disk_full

        if failure is not None:
            dist.barrier()  # the one that ends save_checkpoint on the ranks whose write worked
        code = 0 if failure is None else 1 if is_disk_full(failure, self.dir, 0) else 2
        worst = torch.tensor([code], dtype=torch.int64)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        if not worst.item():
            return True
        if self.rank != 0:
            log.warning("learner.rank_save_failed", rank=self.rank, tag=tag,
                        error=str(failure).splitlines()[0][:300] if failure else "")
            return False
        if failure is not None:
            raise failure
        if worst.item() == 1:
            raise OSError(errno.ENOSPC, f"another rank found the disk full writing checkpoint {tag}")
        raise RuntimeError(f"another rank failed to write checkpoint {tag} (see its log)")

    def discard(self, tag: str) -> None:
        """Remove checkpoint `tag` as far as it was written (a save that failed midway)."""
        shutil.rmtree(self.dir / tag, ignore_errors=True)

    def _prune(self, tag: str, keep: int) -> None:
        tags = sorted(p for p in self.dir.iterdir() if p.is_dir() and p.name.startswith("step"))
        for old in tags[:-keep]:
            if old.name != tag:
                shutil.rmtree(old, ignore_errors=True)
