"""A learner checkpoint as a Hugging Face model folder a user can load without whetstone.

Consumes a checkpoint folder (`Trainer.save`'s: one `step<N>` folder per kept checkpoint,
its learner state as client state) and the model config it was trained from; produces a
folder with config.json, model.safetensors (tied embeddings stored once), the generation
config if the base model has one, and the tokenizer with its chat template, loadable by
`AutoModelForCausalLM.from_pretrained` / `AutoTokenizer.from_pretrained`. The folder is
written beside its target and renamed into place, so a reader never sees half of it.

Weights come from the module state in rank 0's `mp_rank_00_model_states.pt` (ZeRO 0-2: the weights
the learner trains and publishes, in its training dtype), read with `torch.load` and no
DeepSpeed; ZeRO-3 shards are gathered with DeepSpeed's `zero_to_fp32` helper.
It does NOT train, start DeepSpeed or touch the bus.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bus.errors import RunError
from policy.config import ModelConfig

MODEL_STATES = ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt")
"Rank 0's model-state file: ZeRO 0-2, then ZeRO-3 (whose module entry holds no weights)."


@dataclass(frozen=True)
class Kept:
    """One kept checkpoint: its tag (folder name) and the policy version it holds."""

    tag: str
    version: int
    step: int


def _states_file(folder: Path) -> Path | None:
    return next((folder / n for n in MODEL_STATES if (folder / n).is_file()), None)


def _states(folder: Path) -> dict[str, Any]:
    import torch

    # mmap: only what is read is paged in, so listing versions stays cheap.
    return torch.load(_states_file(folder), map_location="cpu", weights_only=False, mmap=True)


def kept(checkpoint_dir: Path) -> list[Kept]:
    """The checkpoints in `checkpoint_dir` whose module state is complete, oldest first."""
    out = []
    root = Path(checkpoint_dir)
    folders = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step")) \
        if root.is_dir() else []
    for folder in folders:
        if _states_file(folder) is None:
            continue
        try:
            states = _states(folder)
        except Exception:  # a checkpoint being written or pruned right now
            continue
        out.append(Kept(folder.name, int(states.get("version", 0)), int(states.get("step", 0))))
    return sorted(out, key=lambda k: (k.version, k.step))


def pick(checkpoints: list[Kept], version: int | None) -> Kept:
    """The checkpoint of `version` (the newest when None); RunError naming the kept ones."""
    if not checkpoints:
        raise RunError("no checkpoints kept")
    if version is None:
        return checkpoints[-1]
    found = [k for k in checkpoints if k.version == version]
    if not found:
        names = ", ".join(str(k.version) for k in checkpoints)
        raise RunError(f"version {version} is not kept; kept versions: {names}")
    return found[-1]


def state_dict(checkpoint_dir: Path, tag: str) -> dict[str, Any]:
    """The model's weights in checkpoint `tag`, by parameter name."""
    folder = Path(checkpoint_dir) / tag
    states = _states(folder)
    stage = int(states.get("ds_config", {}).get("zero_optimization", {}).get("stage", 0))
    if stage < 3:
        return dict(states["module"])
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return get_fp32_state_dict_from_zero_checkpoint(str(checkpoint_dir), tag=tag)


def export(checkpoint_dir: Path, tag: str, model_cfg: ModelConfig, out: Path) -> Path:
    """Write checkpoint `tag` as a Hugging Face folder at `out` (replacing one there)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from policy.model import model_dir

    base = model_dir(model_cfg)
    state = state_dict(checkpoint_dir, tag)
    dtype = next(iter(state.values())).dtype
    config = AutoConfig.from_pretrained(base)
    with torch.device("meta"):  # no init of weights about to be replaced (seconds at 135M)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if config.tie_word_embeddings:  # stored once: the output head is the embedding
        state = {k: v for k, v in state.items() if k != "lm_head.weight"}
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise RunError(f"checkpoint {tag} does not fit the model: missing {missing[:3]}, "
                       f"unexpected {unexpected[:3]}")
    model.tie_weights()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        with torch.no_grad():
            model.save_pretrained(staging)
        try:
            GenerationConfig.from_pretrained(base).save_pretrained(staging)
        except OSError:  # the base model has none
            pass
        AutoTokenizer.from_pretrained(base).save_pretrained(staging)
        if out.exists():
            old = out.with_name(f".{out.name}-old")
            shutil.rmtree(old, ignore_errors=True)
            out.rename(old)
            staging.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out
