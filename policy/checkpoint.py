"""The learner's bookkeeping saved in each DeepSpeed checkpoint (its client state), typed.

Consumes the client state DeepSpeed hands back on resume (a plain dict, as every checkpoint
has held it; `{}` when there is none); produces a `LearnerState`, and from one the same
plain dict for `Trainer.save`. The dict's shape is unchanged, so older checkpoints load.
It does NOT read or write files (the trainer does) or decide what to train.
"""

from __future__ import annotations

from typing import Any

import msgspec

LOADED_ONLY = ("checkpoint", "optimizer_steps")
"Fields the trainer adds on load; never saved."


class LearnerState(msgspec.Struct, kw_only=True):
    """Where a learner stands: saved with each checkpoint, read back on resume."""

    version: int = 0
    "The policy version of the weights the checkpoint holds."
    step: int = 0
    "Learner steps done."
    samples: int = 0
    "Samples trained on, over all steps."
    object_name: str = ""
    "The object holding the weights of `version` ('' for the initial weights)."
    consumed_by_steps: int | None = None
    """Verdicts the steps consumed (trained or left out), through `step`; None in a checkpoint
    older than this count (then the ledger is not checked against it)."""
    consumed_late: int = 0
    "Verdicts that arrived after their group was trained without them."
    consumed_verdicts: list[str] = []
    "Every verdict id consumed, oldest first (`policy.ledger.Ledger`)."
    consumed_groups: list[str] = []
    "Every group id consumed, oldest first."
    checkpoint: str = ""
    "On load: the checkpoint's path ('' when starting fresh). Not saved."
    optimizer_steps: int = 0
    "On load: the optimizer steps the engine holds. Not saved."

    @property
    def from_checkpoint(self) -> bool:
        """True when this state came from a checkpoint."""
        return bool(self.checkpoint)

    @classmethod
    def from_client(cls, client: dict[str, Any]) -> "LearnerState":
        """The state of a client dict as any checkpoint saved it (missing keys: defaults)."""
        return msgspec.convert(client, cls, strict=False)

    def to_client(self) -> dict[str, Any]:
        """The plain dict saved as the checkpoint's client state."""
        out = msgspec.structs.asdict(self)
        for name in LOADED_ONLY:
            out.pop(name)
        return out
