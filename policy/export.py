"""A learner checkpoint as a Hugging Face model folder a user can load without whetstone.

Consumes a checkpoint folder (`Trainer.save`'s: one `step<N>` folder per kept checkpoint)
and the model config it was trained from; produces a folder with config.json,
model.safetensors (tied embeddings stored once), the generation config and the tokenizer
with its chat template, written beside its target and renamed in. Weights come from rank 0's
`mp_rank_00_model_states.pt` (ZeRO 0-2, in the training dtype: a bf16 run's module, not the
float32 master weights, which were never sampled and lost to it on validation,
bench/learning/results/master_weights); ZeRO-3 shards go through DeepSpeed's `zero_to_fp32`.
A LoRA checkpoint gives the base with its adapters merged, as generators run it, or a PEFT
adapter folder. It does NOT train, start DeepSpeed or touch the bus.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

from bus.errors import RunError
from policy.config import LoraSettings, ModelConfig

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


def holds_adapter(state: dict[str, Any]) -> bool:
    """True when a checkpoint's module state is LoRA adapters alone (`[learner] lora`)."""
    return any(".lora_A." in k for k in state)


def checkpoint_holds_adapter(folder: Path) -> bool | None:
    """Whether checkpoint `folder` holds LoRA adapters (None: no module state to tell by)."""
    if _states_file(Path(folder)) is None:
        return None
    return holds_adapter(_states(Path(folder)).get("module") or {})


def export(checkpoint_dir: Path, tag: str, model_cfg: ModelConfig, out: Path,
           lora: LoraSettings | None = None, adapter: bool = False) -> Path:
    """Write checkpoint `tag` at `out` (replacing one there): a Hugging Face model folder,
    or with `adapter` a PEFT adapter folder (LoRA checkpoints only; `lora`: the run's
    `[learner] lora`, which a LoRA checkpoint needs)."""
    from policy.model import model_dir

    base = model_dir(model_cfg)
    state = state_dict(checkpoint_dir, tag)
    if holds_adapter(state):
        if lora is None:
            raise RunError(f"checkpoint {tag} holds LoRA adapters, but the run's config has no "
                           "[learner] lora to read them with")
        fill = partial(_adapter_folder, state, lora, base) if adapter else \
            partial(_save_model, _merged_model(base, state, lora), base)
    elif adapter:
        raise RunError(f"checkpoint {tag} holds full weights (trained without [learner] lora): "
                       "there is no adapter to write; leave out --adapter")
    else:
        fill = partial(_save_model, _full_model(base, state, tag), base)
    return _replace_folder(Path(out), fill)


def _full_model(base: Path, state: dict[str, Any], tag: str) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

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
    return model


def _merged_model(base: Path, state: dict[str, Any], lora: LoraSettings) -> Any:
    """The base with the adapters merged in, in the adapters' (training) dtype: what the
    generators ran (`policy.lora.merge_adapter`)."""
    from transformers import AutoModelForCausalLM

    from policy.lora import Adapter, factors_of, merge_adapter

    adapter = Adapter(factors=factors_of(state), rank=lora.rank, alpha=lora.alpha,
                      target_modules=list(lora.target_modules), base=str(base))
    dtype = next(iter(state.values())).dtype
    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    try:
        merge_adapter(model, adapter)
    except ValueError as exc:
        raise RunError(f"{exc} (base {base})") from None
    return model


def _save_model(model: Any, base: Path, staging: Path) -> None:
    import torch
    from transformers import AutoTokenizer, GenerationConfig

    with torch.no_grad():
        model.save_pretrained(staging)
    try:
        GenerationConfig.from_pretrained(base).save_pretrained(staging)
    except OSError:  # the base model has none
        pass
    AutoTokenizer.from_pretrained(base).save_pretrained(staging)


def _adapter_folder(state: dict[str, Any], lora: LoraSettings, base: Path, staging: Path) -> None:
    """PEFT's adapter layout: weights named without the adapter name ('default')."""
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    from policy.lora import adapter_config_json

    tensors = {k.replace(".default.", "."): v.detach().contiguous() for k, v in state.items()}
    save_file(tensors, str(staging / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = adapter_config_json(lora.rank, lora.alpha, lora.target_modules, str(base))
    (staging / "adapter_config.json").write_text(json.dumps(config, indent=2))
    AutoTokenizer.from_pretrained(base).save_pretrained(staging)


def _replace_folder(out: Path, fill: Callable[[Path], None]) -> Path:
    """`fill` a folder beside `out`, then rename it into place (a reader never sees half)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        fill(staging)
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
