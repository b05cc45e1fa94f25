"""A LoRA learner over a real nats-server with the tiny model: adapter-only versions, the
generators' logprobs at a version against the learner's own, and the model it leaves.

The test plays the judge; the learner, a generator and a late follower each get their own
connection. "The learner's logprobs at version v" are its DeepSpeed engine's, resumed from
the checkpoint that holds v.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest
import torch
from typer.testing import CliRunner

from actors import generator, learner
from bus import subjects
from bus.codec import unpack_f32, unpack_ids
from bus.nats_bus import Bus, Identity
from policy.config import LoraSettings, ModelConfig
from policy.versions import current_version, fetch_weights
from runtime.config import RunConfig, dump
from tests.conftest import bus_settings, until
from tests.test_learner import sample_after_one_version, tiny_run_config, version_at_least

pytestmark = pytest.mark.bus

LORA = LoraSettings(rank=4, alpha=8.0)
PROMPT = [1, 504, 3458, 314, 4649, 282, 253]


def lora_config(tmp_path, **training) -> RunConfig:
    """The tiny run with LoRA, trained in fp32 (the generator samples in fp32 too)."""
    cfg = tiny_run_config(tmp_path, **training)
    return msgspec.structs.replace(cfg, learner=msgspec.structs.replace(
        cfg.learner, lora=LORA, precision="fp32"))


def token_logprobs(forward, prompt: list[int], ids: list[int]) -> torch.Tensor:
    """log p(ids | prompt) at temperature 1, from `forward(input_ids) -> logits`."""
    with torch.no_grad():
        logits = forward(torch.tensor([prompt + ids])).float()
    logp = torch.log_softmax(logits[0], -1)
    return torch.tensor([logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(ids)])


async def learner_logprobs(cfg: RunConfig, turns: list[tuple[list[int], list[int]]]) -> list:
    """The learner's own logprobs of each (prompt, completion): its DeepSpeed engine,
    resumed from its newest checkpoint."""
    from policy.ranks import RankGroup

    ranks = RankGroup(cfg.trainer, Path(cfg.learner.checkpoint_dir))
    resumed = await ranks.start()
    try:
        engine = ranks.trainer.engine
        got = [token_logprobs(lambda x: engine(input_ids=x).logits, p, ids) for p, ids in turns]
    finally:
        await ranks.close()
    return [resumed["version"], got]


async def test_generators_sample_an_adapter_version_with_the_learner_s_own_logprobs(
        bus, nats_server, tmp_path):
    """8 judged attempts make version 1, an adapter (a small fraction of the full weights,
    naming its base); the generator's attempts at version 1 carry the logprobs the learner's
    engine gives at version 1, not the base's; a follower started after it loads the base
    and that adapter, and its weights give the same logprobs."""
    from policy.engines import open_engine
    from policy.follower import WeightFollower
    from policy.model import load_model
    from policy.weights import encode_state

    cfg = lora_config(tmp_path)
    buses = [await Bus.connect(bus_settings(nats_server.url), Identity(k, f"{k}-1"))
             for k in ("learner", "generator", "late")]
    learn_bus, gen_bus, late_bus = buses
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(learner.run, learn_bus, cfg)
            await tg.start(generator.run, gen_bus, cfg)
            got = await sample_after_one_version(bus, gen_bus)
            record = await current_version(bus)
            blob = await fetch_weights(bus, record)
            late = open_engine(cfg.generator, cfg.model, seed=0)
            async with anyio.create_task_group() as follow:  # started: it runs the current version
                await follow.start(WeightFollower(late_bus, late).run)
                follow.cancel_scope.cancel()
            for b in buses:
                b.stopping.set()
    finally:
        for b in buses:
            await b.close()
    full_size = len(encode_state(load_model(cfg.model).state_dict()))
    assert (record.version, record.weights, record.base) == (1, "lora", "tiny")
    assert record.size == len(blob) and record.size * 50 < full_size
    assert [a.policy_version for a in got] == [1, 1] and late.version == 1
    turns = [(unpack_ids(a.turns[0].prompt_ids).tolist(),
              unpack_ids(a.turns[0].completion_ids).tolist()) for a in got]
    version, learned = await learner_logprobs(cfg, turns)
    base = load_model(cfg.model)
    assert version == 1
    for a, (prompt, ids), theirs in zip(got, turns, learned):
        reported = torch.tensor(unpack_f32(a.turns[0].logprobs).tolist())
        assert torch.allclose(reported, theirs, atol=2e-3), (reported, theirs)
        assert torch.allclose(token_logprobs(lambda x: late.model(x).logits, prompt, ids),
                              theirs, atol=2e-3)
        assert not torch.allclose(token_logprobs(lambda x: base(x).logits, prompt, ids),
                                  theirs, atol=2e-3)


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0].float()


async def test_a_lora_run_leaves_the_merged_model_and_the_adapter_folder(bus, nats_server, tmp_path):
    """One step, then a stop: `<run>/model/` is the base with version 1's adapter merged
    (the logits a generator runs), `<run>/adapter/` a PEFT folder whose PEFT-merged model
    gives the same logits, both loadable by `whet eval`; `whet export-model --adapter`
    writes the same adapter; a run that trained full weights has none to write (exit 2);
    a learner without LoRA refuses to resume the LoRA checkpoint, saying why."""
    from transformers import AutoModelForCausalLM

    from policy.lora import merge_adapter, read_adapter
    from policy.model import load_model
    from runtime.cli.eval import model_folder
    from bus.errors import ConfigError
    from policy.ranks import RankGroup
    from runtime.cli.main import app
    from tests.test_learner_crash import synthetic_verdicts

    run = tmp_path / "run"
    run.mkdir()
    cfg = lora_config(tmp_path, mode="sync", batch_size=4, group_size=2)
    cfg = msgspec.structs.replace(cfg, learner=msgspec.structs.replace(cfg.learner,
                                                                       checkpoint_dir=""))
    (run / "config.resolved.json").write_bytes(dump(cfg))
    learn_bus = await Bus.connect(bus_settings(nats_server.url),
                                  Identity("learner", "learner-1", run_dir=str(run)))
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(learner.run, learn_bus, cfg)
            await bus.publish_many(subjects.verdict_subject("train"), [
                (v.verdict_id, v) for v in synthetic_verdicts(2, 0, (1.0, 0.0), "a")])
            await until(lambda: version_at_least(bus, 1), 60, "version 1")
            blob = await fetch_weights(bus, await current_version(bus))
            learn_bus.stopping.set()
    finally:
        await learn_bus.close()
    generated = load_model(cfg.model)
    merge_adapter(generated, read_adapter(blob))
    merged = AutoModelForCausalLM.from_pretrained(run / "model", dtype=torch.float32).eval()
    assert (run / "adapter" / "adapter_config.json").is_file()
    # The checkpoint's adapter is fp32 (trained in fp32), the published one bf16.
    assert torch.allclose(_logits(merged), _logits(generated), atol=2e-3)
    assert not torch.allclose(_logits(merged), _logits(load_model(cfg.model)), atol=2e-3)
    for folder in (run / "model", run / "adapter"):
        assert model_folder(folder) == folder
    peft_merged = load_model(ModelConfig(path=str(run / "adapter")))
    assert torch.allclose(_logits(peft_merged), _logits(merged), atol=1e-4)

    cli = CliRunner()
    done = cli.invoke(app, ["export-model", str(run), "--adapter"])
    assert done.exit_code == 0, done.output
    assert (run / "adapter-v1" / "adapter_model.safetensors").read_bytes() == \
        (run / "adapter" / "adapter_model.safetensors").read_bytes()
    full = msgspec.structs.replace(cfg, learner=msgspec.structs.replace(cfg.learner, lora=None))
    (run / "config.resolved.json").write_bytes(dump(full))
    done = cli.invoke(app, ["export-model", str(run)])
    assert done.exit_code == 2 and "no [learner] lora" in done.output
    (run / "checkpoints" / "step00000009").mkdir()
    torch.save({"module": {"model.embed_tokens.weight": torch.zeros(2)}, "version": 9, "step": 9},
               run / "checkpoints" / "step00000009" / "mp_rank_00_model_states.pt")
    done = cli.invoke(app, ["export-model", str(run), "--adapter"])
    out = done.output.strip().splitlines()
    assert done.exit_code == 2 and len(out) == 1 and "no adapter to write" in out[0]

    ranks = RankGroup(full.trainer, run / "checkpoints")
    try:
        with pytest.raises(ConfigError, match="holds LoRA adapters but \\[learner\\] lora is off"):
            await ranks.start()
    finally:
        await ranks.close()
