"""The learner's files and objects: where its checkpoints go, what each published weight
object holds and how many stay in the object store, and the model folder it leaves.

Consumes the run config and the actor's identity (its run directory); produces paths, the
kept-version count and, at the learner's stop, `<run dir>/model/` (with LoRA merged, plus
`<run dir>/adapter/`) from the newest checkpoint (`policy.export`). It trains nothing and
publishes nothing itself: `actors.learner` and `actors.learner_rank` call it.
"""

from __future__ import annotations

import tempfile
import time
from functools import partial
from pathlib import Path

import anyio
import structlog

from bus.nats_bus import Bus
from policy.export import export
from runtime.config import RunConfig

log = structlog.get_logger("actors.learner")


def checkpoint_dir(config: RunConfig, bus: Bus) -> Path:
    """Where this run's learner checkpoints live."""
    if config.learner.checkpoint_dir:
        return Path(config.learner.checkpoint_dir)
    if bus.identity.run_dir:
        return Path(bus.identity.run_dir) / "checkpoints"
    log.warning("learner.checkpoints_temporary", reason="no run directory")
    return Path(tempfile.mkdtemp(prefix="whet-learner-"))


KEEP_ADAPTERS_MOST = 64
"Most adapter versions kept for the staleness window (a generator follows the 64 newest)."


def published_kind(config: RunConfig) -> tuple[str, str]:
    """What each version's object holds ('full' or 'lora') and the base of an adapter."""
    if config.learner.lora is None:
        return "full", ""
    return "lora", config.model.path or config.model.name


def kept_versions(config: RunConfig) -> int:
    """Versions kept in the object store: `keep_versions`, and with LoRA (megabytes each)
    at least every version inside the staleness window, so a generator that lags, or a
    held-out round that names one, can still read it."""
    keep = config.learner.keep_versions
    if config.learner.lora is None:
        return keep
    return max(keep, min(config.training.staleness + 2, KEEP_ADAPTERS_MOST))


async def export_final(config: RunConfig, bus: Bus, ckpt_dir: Path) -> None:
    """Write the checkpoint `latest` names as `<run dir>/model/` (with LoRA: merged, and the
    adapter folder as `<run dir>/adapter/`; nothing without a run directory or a checkpoint).
    A failure is logged; it never stops the learner's exit."""
    latest = ckpt_dir / "latest"
    if not bus.identity.run_dir or not latest.is_file():
        return
    tag, run_dir = latest.read_text().strip(), Path(bus.identity.run_dir)
    lora = config.learner.lora
    for out, adapter in ((run_dir / "model", False), (run_dir / "adapter", True)):
        if adapter and lora is None:
            continue
        began = time.monotonic()
        try:
            await anyio.to_thread.run_sync(partial(export, ckpt_dir, tag, config.model, out,
                                                   lora=lora, adapter=adapter))
        except Exception as exc:  # the checkpoints stay: `whet export-model` can retry
            log.error("learner.model_export_failed", checkpoint=tag, error=repr(exc))
            return
        log.info("learner.model_exported", checkpoint=tag, path=str(out), adapter=adapter,
                 seconds=round(time.monotonic() - began, 3))
