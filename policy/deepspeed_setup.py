"""What a learner rank hands DeepSpeed: the engine config and the import for a device.

Consumes `[learner]` (`LearnerConfig`) and the world size; produces DeepSpeed's config dict
(`ds_config`: batch sizes, clipping, ZeRO stage, precision, the optimizer) and imports
DeepSpeed for a device (`import_engine`, after pointing its just-in-time ops at this
environment's folder, `policy.extensions`). It builds no engine: `policy.trainer` does.
"""

from __future__ import annotations

import os
from typing import Any

from policy.config import LearnerConfig
from policy.precision import training_precision


def ds_config(lc: LearnerConfig, world: int) -> dict:
    """The DeepSpeed config for a learner section."""
    zero: dict[str, Any] = {"stage": lc.zero_stage}
    if lc.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "train_batch_size": world,
        # Batches vary in size: every backward() accumulates, every step() is one update.
        "managed_gradient_accumulation": False,
        "gradient_clipping": lc.grad_clip,
        "steps_per_print": 1 << 30,
        "zero_optimization": zero,
        # Ranks of their own (possibly on other hosts) each write a whole checkpoint folder.
        "checkpoint": {"use_node_local_storage": lc.ranks == "bus"},
        "bf16": {"enabled": training_precision(lc.precision, lc.device) == "bf16"},
        "optimizer": {"type": "AdamW", "params": {
            "lr": lc.lr, "weight_decay": lc.weight_decay, "betas": [0.9, 0.999], "eps": 1e-8,
            # torch's AdamW needs no compiled op; the CPU-offload optimizer does.
            "torch_adam": not lc.offload_optimizer}},
    }


def import_engine(device: str) -> None:
    """Import DeepSpeed for `device` (slow: seconds); a rank may do it while it waits."""
    os.environ["DS_ACCELERATOR"] = device
    from policy.extensions import prepare

    prepare()
    import deepspeed  # noqa: F401
