"""The torch engine's prefix cache: a continuation starts from the keys and values of the
sequence decoded before it, samples what a full prefill samples, and never uses the keys of
weights that are gone. The cache itself is tested on its own first (no model)."""

from __future__ import annotations

import pytest
import torch

from judging.episode import tool_text
from policy.config import GeneratorConfig, ModelConfig
from policy.engine import RowSettings
from policy.prefix_cache import PrefixCache, WeightsTag

LIVE = WeightsTag(-1, "float32", 0)
GREEDY = RowSettings(0.0, 1.0, 12)
LISTING = "".join(f"src/pkg/module_{i}.py\ntests/test_module_{i}.py\n" for i in range(12))


def layers_of(tokens: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two layers of keys and values for `tokens` tokens: 2 * 2 * tokens * 4 floats."""
    return [(torch.zeros(1, 1, tokens, 4), torch.zeros(1, 1, tokens, 4)) for _ in range(2)]


@pytest.mark.unit
def test_the_longest_stored_proper_prefix_of_the_same_weights_is_found():
    """A lookup finds the longest entry whose ids begin the context, never one that differs in
    a token, is the whole context, or was made by other weights."""
    cache = PrefixCache(10**6)
    cache.put(LIVE, [1, 2], layers_of(2))
    cache.put(LIVE, [1, 2, 3, 4], layers_of(4))
    cache.put(LIVE, [1, 9, 3, 4, 5], layers_of(5))
    cache.put(WeightsTag(-1, "float32", 1), [1, 2, 3, 4, 5], layers_of(5))
    assert cache.longest(LIVE, [1, 2, 3, 4, 5, 6]).ids == (1, 2, 3, 4)
    assert cache.longest(LIVE, [1, 2, 3, 4]).ids == (1, 2)
    assert cache.longest(LIVE, [1, 3, 3, 4, 5, 6]) is None
    assert cache.longest(WeightsTag(0, "float32", 0), [1, 2, 3, 4, 5, 6]) is None
    assert (cache.stats.hits, cache.stats.misses, cache.stats.reused_tokens) == (2, 2, 6)


@pytest.mark.unit
def test_the_cache_stays_within_its_bytes_oldest_out_and_drops_changed_weights():
    """Entries past the byte budget push out the oldest; one larger than the budget is not
    kept; dropping a version's weights removes its entries and only those."""
    per_token = 2 * 2 * 4 * 4
    cache = PrefixCache(10 * per_token)
    cache.put(LIVE, [1, 2, 3, 4], layers_of(4))
    cache.put(WeightsTag(7, "float32", 0), [5, 6, 7], layers_of(3))
    cache.put(LIVE, [8, 9, 10, 11], layers_of(4))
    assert [ids for _, ids in cache.entries] == [(5, 6, 7), (8, 9, 10, 11)]
    assert cache.nbytes == 7 * per_token and cache.stats.evicted == 1
    cache.put(LIVE, list(range(11)), layers_of(11))
    assert len(cache.entries) == 2
    cache.drop(7)
    assert [ids for _, ids in cache.entries] == [(8, 9, 10, 11)] and cache.nbytes == 4 * per_token


def engine_of(name: str, prefix_cache_mb: int = 512):
    from policy.torch_engine import TorchEngine

    torch.set_num_threads(1)
    return TorchEngine(GeneratorConfig(engine="torch", dtype="float32",
                                       prefix_cache_mb=prefix_cache_mb), ModelConfig(name=name), 0)


def continuation(engine, context: list[int], sample, tool_output: str) -> list[int]:
    """The next turn's context, built as the generator builds it: stored ids, then the tool
    message's ids."""
    closed = engine.chat.closes(sample.token_ids, sample.finish_reason)
    return context + sample.token_ids + engine.chat.feedback_ids(tool_output, closed, "tool")


@pytest.mark.bus
def test_continuations_from_the_cache_sample_what_a_full_prefill_samples():
    """On SmolLM2-135M in float32, greedy: a batch of two continuations with cached prefixes
    of different lengths and one fresh prompt samples the same ids, with logprobs within
    float32 rounding, as the same batch prefilled in full; only the new tokens are prefilled."""
    engine = engine_of("smollm2-135m")
    first = [engine.chat.prompt_ids("Fix the failing test in this repository."),
             engine.chat.prompt_ids("Read pkg/cart.py, then run the tests of the cart module.")]
    turn = engine.run_rows(first, [GREEDY, GREEDY])
    stored = [len(c) + len(s.token_ids) - 1 for c, s in zip(first, turn)]
    contexts = [continuation(engine, first[0], turn[0], LISTING),
                continuation(engine, first[1], turn[1], tool_text("read_file", path="pkg/cart.py")),
                engine.chat.prompt_ids("Submit.")]
    before = engine.prefixes.stats.prefilled_tokens
    cached = engine.run_rows(contexts, [GREEDY] * 3)
    assert engine.prefixes.stats.hits == 2 and engine.prefixes.stats.reused_tokens == sum(stored)
    assert engine.prefixes.stats.prefilled_tokens - before == sum(map(len, contexts)) - sum(stored)
    engine.prefixes.drop(-1)
    full = engine.run_rows(contexts, [GREEDY] * 3)
    assert engine.prefixes.stats.hits == 2
    for got, want in zip(cached, full):
        assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)


@pytest.mark.bus
def test_a_context_several_rows_share_is_prefilled_once():
    """A group's rows of one prompt beside another prompt: each distinct prompt is prefilled
    once, and every row samples what the prompt alone samples (greedy, float32)."""
    engine = engine_of("smollm2-135m", prefix_cache_mb=0)
    group, other = (engine.chat.prompt_ids("Fix the failing test in this repository."),
                    engine.chat.prompt_ids("Submit."))
    alone = engine.run_rows([group], [GREEDY]) + engine.run_rows([other], [GREEDY])
    before = engine.prefixes.stats.prefilled_tokens
    together = engine.run_rows([group, other, group, group], [GREEDY] * 4)
    assert engine.prefixes.stats.prefilled_tokens - before == len(group) + len(other)
    for got, want in zip(together, [alone[0], alone[1], alone[0], alone[0]]):
        assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)


@pytest.mark.bus
def test_new_weights_never_continue_from_the_keys_of_old_ones():
    """After new weights are installed, a continuation of a turn sampled by the old ones is
    prefilled in full: no hit, the old entries gone, and its logprobs are the new weights'
    (a teacher-forced pass). Rows of a pinned copy never use the live weights' entries."""
    from policy.model import load_model
    from policy.weights import encode_parts

    engine = engine_of("tiny")
    prompt = engine.chat.prompt_ids("Write f.")
    [old] = engine.run_rows([prompt], [GREEDY])
    context = continuation(engine, prompt, old, "ok")
    trained = load_model(ModelConfig(name="tiny"), "float32")
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p) * 0.05)
            p.copy_(p.to(torch.bfloat16).float())  # weights travel in bf16
    engine.apply_pinned(0, None, "float32")
    engine.apply_weights(b"".join(bytes(p) for p in encode_parts(trained.state_dict())))
    assert not engine.prefixes.entries
    [new] = engine.run_rows([context], [GREEDY])
    assert engine.prefixes.stats.hits == 0
    with torch.no_grad():
        logp = torch.log_softmax(trained(torch.tensor([context + new.token_ids])).logits[0], -1)
    assert new.logprobs == pytest.approx(
        [logp[len(context) - 1 + i, t].item() for i, t in enumerate(new.token_ids)], abs=1e-4)
    pinned = RowSettings(0.0, 1.0, 12, dtype="float32", pinned=0)
    engine.run_rows([continuation(engine, context, new, "ok")], [pinned])
    assert engine.prefixes.stats.hits == 0
