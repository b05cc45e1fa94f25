"""The warm start's training run: demonstrations through the learner's ranks, then a kept
checkpoint and a model folder.

Consumes demonstrations (`bus.messages.Demo`), the learner's `TrainerConfig`, the
`[warmstart]` section, the training stop strings and an output folder; produces
<out>/checkpoint/ (a DeepSpeed checkpoint, `Trainer.save`'s layout), <out>/model/ (a Hugging
Face folder by `policy.export`: version 0 of the RL stage) and <out>/sft.json (`SftReport`).
It trains with the learner's own engine (`policy.ranks.RankGroup`, `Trainer.sft_step`):
same optimizer, precision, ZeRO stage and world size, the warm start's lr; ranks on the bus
become child ranks here. It knows no bus and no run directory.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Sequence

import msgspec
import structlog

from bus.errors import InputError, RunError
from bus.messages import Demo
from policy.chat import hf_chat_format
from policy.config import TrainerConfig, WarmstartConfig
from policy.export import export
from policy.model import load_tokenizer
from policy.ranks import RankGroup
from policy.sft import demo_rows, sft_batches

log = structlog.get_logger("policy.warmstart")


class SftReport(msgspec.Struct, kw_only=True):
    """What an SFT run did (<out>/sft.json)."""

    steps: int
    "Optimizer updates."
    demos_used: int
    "Demonstrations trained on (each `epochs` times)."
    left_out_too_long: list[str]
    "Task ids of demonstrations longer than `[warmstart] max_len` tokens, not trained on."
    loss: list[float]
    "Masked token-mean negative log-likelihood of each step's batch, before its update."
    tokens: int
    "Trained (assistant) tokens over all steps."
    cpu_s: float
    "CPU seconds of this process and its finished children (other ranks)."
    wall_s: float
    "Wall-clock seconds, model load and export included."
    lr: float
    epochs: float
    batch_size: int
    checkpoint: str
    "The checkpoint folder's tag."


def cpu_seconds() -> float:
    """CPU seconds of this process and its finished (waited-for) children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def sft_trainer_config(trainer: TrainerConfig, warm: WarmstartConfig, out: Path) -> TrainerConfig:
    """The learner's config as the warm start runs it: its lr, child ranks, checkpoints in
    <out>/checkpoint."""
    learner = msgspec.structs.replace(trainer.learner, lr=warm.lr, ranks="children",
                                      checkpoint_dir=str(out / "checkpoint"), keep_checkpoints=1)
    return msgspec.structs.replace(trainer, learner=learner)


async def train(demos: Sequence[Demo], trainer: TrainerConfig, warm: WarmstartConfig,
                out: Path, stops: Sequence[str] = (), seed: int = 0,
                source: str = "demonstrations") -> SftReport:
    """Fine-tune on `demos` as `warm` says; write <out>/checkpoint, <out>/model, <out>/sft.json.
    InputError naming `source` for a demonstration the generator could not have sampled;
    RunError when <out>/checkpoint holds a checkpoint already or no demonstration fits."""
    began, cpu0 = time.monotonic(), cpu_seconds()
    out = Path(out)
    config = sft_trainer_config(trainer, warm, out)
    ckpt = Path(config.learner.checkpoint_dir)
    if (ckpt / "latest").exists():
        raise RunError(f"{ckpt} holds a checkpoint already; write the warm start to an empty "
                       "folder (another --out, or remove it)")
    try:
        rows = demo_rows(demos, hf_chat_format(load_tokenizer(config.model)), stops, warm.max_len)
    except ValueError as exc:
        raise InputError(source, 0, "", str(exc)) from None
    if not rows.samples:
        raise RunError(f"no demonstration to train on: {len(demos)} given, "
                       f"{len(rows.too_long)} longer than max_len {warm.max_len}")
    batches = sft_batches(rows.samples, warm.batch_size, warm.epochs, seed)
    group = RankGroup(config, ckpt)
    losses, tokens = [], 0
    try:
        await group.start()
        for step, batch in enumerate(batches, start=1):
            stats = await group.call("sft_step", batch)
            losses.append(round(stats["loss"], 6))
            tokens += int(stats["tokens"])
            log.info("warmstart.step_done", step=step, of=len(batches), loss=losses[-1],
                     tokens=int(stats["tokens"]), seconds=round(stats["train_s"], 3))
        tag = f"step{len(batches)}"
        await group.call("save", tag, {"version": 0, "step": len(batches), "warmstart": True})
    finally:
        await group.close()
    export(ckpt, tag, config.model, out / "model", lora=config.learner.lora)
    report = SftReport(steps=len(batches), demos_used=len(rows.samples),
                       left_out_too_long=rows.too_long, loss=losses, tokens=tokens,
                       cpu_s=round(cpu_seconds() - cpu0, 2), wall_s=round(time.monotonic() - began, 2),
                       lr=warm.lr, epochs=warm.epochs, batch_size=warm.batch_size, checkpoint=tag)
    (out / "sft.json").write_bytes(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
    return report
