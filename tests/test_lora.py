"""LoRA pieces on their own: the `[learner] lora` config, an adapter as version bytes, its
merge into plain weights (against PEFT's own forward), the version record, and the torch
engine running adapter versions live and pinned.

The unit tests use a two-layer toy module with Llama's layer names; the engine tests load
the tiny model.
"""

from __future__ import annotations

import msgspec
import pytest
import torch
from torch import nn

from bus.errors import ConfigError
from bus.messages import WeightVersion
from policy.config import LoraSettings
from policy.lora import (encode_adapter, factors_of, is_adapter, merge_adapter, read_adapter,
                         wrap)
from policy.weights import encode_state
from runtime.config import RunConfig, load

torch.set_num_threads(1)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.v_proj, self.down_proj = nn.Linear(8, 8), nn.Linear(8, 4), nn.Linear(4, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(torch.tanh(self.v_proj(torch.tanh(self.q_proj(x)))))


class Toy(nn.Module):
    """Two blocks named as in a Llama model (`model.layers.<i>.q_proj`)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.model = nn.Module()
        self.model.layers = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.model.layers:
            x = layer(x)
        return x


SETTINGS = LoraSettings(rank=2, alpha=6.0, target_modules=["q_proj", "v_proj"])


def trained_toy() -> nn.Module:
    """The toy wrapped with adapters whose B is no longer zero, values bf16-exact (the wire's)."""
    peft_model = wrap(Toy(), SETTINGS)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen).bfloat16().float())
    return peft_model.eval()


def adapter_bytes(peft_model: nn.Module) -> bytes:
    from policy.lora import adapter_state

    return b"".join(encode_adapter(adapter_state(peft_model), SETTINGS, base="toy"))


@pytest.mark.unit
@pytest.mark.parametrize("text, key, expectation", [
    ("[learner]\nlora = { rank = 0 }\n", "learner.lora.rank", ">= 1"),
    ("[learner]\nlora = { dropout = 1.0 }\n", "learner.lora.dropout", "< 1"),
    ("[learner]\nlora = { target_modules = [] }\n", "learner.lora.target_modules", "length >= 1"),
    ("[learner]\nlora = { target_modules = ['q_proj', 'lm_head'] }\n",
     "learner.lora.target_modules", "'lm_head' cannot take an adapter"),
    ("[learner]\nlora = { ranks = 16 }\n", "learner.lora.ranks", "unknown key"),
    ("[learner]\nzero_stage = 3\nlora = { rank = 8 }\n", "learner.zero_stage", "ZeRO stages 0-2"),
])
def test_bad_lora_settings_name_the_key_and_the_fix(tmp_path, text, key, expectation):
    """Each bad `[learner] lora` is a ConfigError naming the key and what to do."""
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert err.value.key == key and expectation in str(err.value)


@pytest.mark.unit
def test_lora_is_off_by_default_and_a_table_turns_it_on(tmp_path):
    """No table: full weights; a table takes its values and defaults the rest."""
    assert RunConfig().learner.lora is None
    path = tmp_path / "lora.toml"
    path.write_text("[learner]\nlora = { rank = 8, alpha = 16 }\n")
    lora = load(path).learner.lora
    assert (lora.rank, lora.alpha, lora.dropout) == (8, 16.0, 0.0)
    assert lora.target_modules[:2] == ["q_proj", "k_proj"] and "down_proj" in lora.target_modules


@pytest.mark.unit
def test_an_adapter_round_trips_as_bytes_and_merges_to_peft_s_own_output():
    """encode -> read gives every (A, B) pair, rank, alpha and base; merged into the plain
    model, the outputs are PEFT's unmerged forward."""
    peft_model = trained_toy()
    blob = adapter_bytes(peft_model)
    adapter = read_adapter(blob)
    assert is_adapter(blob) and adapter.base == "toy" and adapter.scale == 3.0
    assert sorted(adapter.factors) == [f"model.layers.{i}.{m}.weight"
                                       for i in (0, 1) for m in ("q_proj", "v_proj")]
    plain = Toy().eval()
    merge_adapter(plain, adapter)
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.allclose(plain(x), peft_model(x), atol=1e-5)
        assert not torch.allclose(Toy()(x), peft_model(x), atol=1e-3)


@pytest.mark.unit
def test_merging_onto_kept_base_values_never_stacks_adapters():
    """Two adapters merged one after the other onto the kept base: the second alone counts."""
    from policy.lora import base_values

    first = read_adapter(adapter_bytes(trained_toy()))
    other = trained_toy()
    with torch.no_grad():
        for name, p in other.named_parameters():
            if "lora_B" in name:
                p.mul_(-0.5)
    second = read_adapter(adapter_bytes(other))
    plain, once = Toy(), Toy()
    base = base_values(plain, list(first.factors))
    merge_adapter(plain, first, base)
    merge_adapter(plain, second, base)
    merge_adapter(once, second)
    for (name, p), q in zip(plain.named_parameters(), once.parameters()):
        assert torch.equal(p, q), name


@pytest.mark.unit
def test_full_weights_and_broken_adapters_are_told_apart():
    """Full-weight bytes are no adapter; a lone lora_A, or an adapter for other shapes, is a
    ValueError naming the weight."""
    full = encode_state(Toy().state_dict())
    assert not is_adapter(full) and not is_adapter(None)
    with pytest.raises(ValueError, match="full model"):
        read_adapter(full)
    with pytest.raises(ValueError, match="q_proj"):
        factors_of({"base_model.model.model.layers.0.q_proj.lora_A.weight": torch.zeros(2, 8)})
    adapter = read_adapter(adapter_bytes(trained_toy()))
    small = nn.Module()
    small.model = nn.Module()
    small.model.layers = nn.ModuleList([nn.Module(), nn.Module()])
    for layer in small.model.layers:
        layer.q_proj, layer.v_proj = nn.Linear(8, 3), nn.Linear(8, 4)
    with pytest.raises(ValueError, match="does not fit"):
        merge_adapter(small, adapter)


@pytest.mark.unit
def test_a_version_record_from_before_lora_reads_as_full_weights():
    """A WeightVersion written without the new fields decodes with weights 'full', base ''."""
    from bus.codec import decode, encode

    class OldWeightVersion(msgspec.Struct, kw_only=True, tag_field="t", tag="whet.weights.v1"):
        version: int
        object_name: str
        size: int = 0

    record = decode(encode(OldWeightVersion(version=3, object_name="policy-v00000003")),
                    WeightVersion)
    assert (record.version, record.weights, record.base) == (3, "full", "")


@pytest.mark.unit
def test_adapter_versions_stay_readable_through_the_staleness_window():
    """With LoRA the store keeps every version a sample may still be admitted from."""
    from actors.learner_files import kept_versions, published_kind
    from runtime.config import TrainingConfig

    full = RunConfig(training=TrainingConfig(max_staleness=8))
    lora = msgspec.structs.replace(full, learner=msgspec.structs.replace(
        full.learner, lora=LoraSettings()))
    assert kept_versions(full) == full.learner.keep_versions == 3
    assert kept_versions(lora) == 10
    assert published_kind(full) == ("full", "") and published_kind(lora) == ("lora", "smollm2-135m")


def _logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


@pytest.mark.bus
def test_torch_engine_runs_adapter_versions_live_and_pinned():
    """The engine's live weights are base + the newest adapter (never two stacked); a pinned
    copy is base + its own adapter; a dtype loaded later gets the current one; None goes
    back to the base."""
    from policy.config import GeneratorConfig, ModelConfig
    from policy.lora import adapter_state
    from policy.model import load_model
    from policy.torch_engine import TorchEngine

    cfg = ModelConfig(name="tiny")
    lora = LoraSettings(rank=4, alpha=8.0)

    def trained(seed: int):
        model = wrap(load_model(cfg), lora)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():  # values the bf16 wire keeps exactly
                if "lora_B" in name:
                    p.copy_((torch.randn(p.shape, generator=gen) * 0.05).bfloat16().float())
                elif "lora_A" in name:
                    p.copy_(p.bfloat16().float())
        blob = b"".join(encode_adapter(adapter_state(model), lora, base="tiny"))
        return model.eval(), blob

    ids = [1, 504, 3458, 314, 4649, 282, 253]
    (one, blob1), (two, blob2) = trained(1), trained(2)
    engine = TorchEngine(GeneratorConfig(dtype="bfloat16"), cfg, seed=0)
    engine.apply_weights(blob1)
    engine.apply_weights(blob2)
    engine._model("float32")  # loaded after the adapter arrived
    engine.apply_pinned(1, blob1, "float32")
    live, pinned = engine.models["float32"], engine.pinned_models[1]
    assert torch.allclose(_logits(live, ids), _logits(two, ids), atol=1e-4)
    assert torch.allclose(_logits(pinned, ids), _logits(one, ids), atol=1e-4)
    assert not torch.allclose(_logits(one, ids), _logits(two, ids), atol=1e-2)
    bf16 = _logits(engine.models["bfloat16"], ids)
    assert (bf16 - _logits(two, ids)).abs().max() < 0.1  # bf16 rounding only
    engine.apply_weights(None)
    assert torch.equal(_logits(live, ids), _logits(load_model(cfg), ids))


@pytest.mark.unit
def test_vllm_starts_with_lora_on_only_for_a_lora_run_at_a_rank_it_accepts(tmp_path):
    """vLLM's engine arguments: LoRA on, max_lora_rank rounded up to one vLLM allows."""
    from policy.config import GeneratorConfig, ModelConfig
    from policy.vllm_engine import engine_args

    (tmp_path / "config.json").write_text("{}")
    gen, model = GeneratorConfig(engine="vllm"), ModelConfig(path=str(tmp_path))
    assert "enable_lora" not in engine_args(gen, model, 0)
    args = engine_args(gen, model, 0, LoraSettings(rank=12))
    assert args["enable_lora"] and args["max_lora_rank"] == 16 and args["max_loras"] == 2
