"""The trained model as a Hugging Face folder: the learner writes `<run>/model/` when it
stops, `whet export-model` writes any kept version, and transformers loads both.

The learner runs on a real bus with the tiny model; the test plays the judge.
"""

from __future__ import annotations

import anyio
import msgspec
import pytest
import torch
from typer.testing import CliRunner

from actors import learner
from bus import subjects
from bus.nats_bus import Bus, Identity
from policy.versions import current_version, fetch_weights
from runtime.cli.main import app
from runtime.config import dump
from tests.conftest import bus_settings, until
from tests.test_learner import tiny_run_config, version_at_least

PROMPT = [1, 504, 3458, 314, 4649, 282, 253]


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0].float()


@pytest.mark.bus
async def test_learner_leaves_a_model_folder_transformers_loads_and_generates_from(
        bus, nats_server, tmp_path):
    """Two steps, then a stop: `<run>/model/` holds version 2, whose logits are those of the
    weights the learner published as version 2; it generates; the CLI exports the same."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from policy.model import load_model
    from policy.weights import decode_state, install_state
    from tests.test_learner_crash import synthetic_verdicts

    run = tmp_path / "run"
    run.mkdir()
    cfg = tiny_run_config(tmp_path, mode="sync", batch_size=4, group_size=2)
    cfg = msgspec.structs.replace(cfg, learner=msgspec.structs.replace(cfg.learner,
                                                                       checkpoint_dir=""))
    (run / "config.resolved.json").write_bytes(dump(cfg))
    learn_bus = await Bus.connect(bus_settings(nats_server.url),
                                  Identity("learner", "learner-1", run_dir=str(run)))
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(learner.run, learn_bus, cfg)
            for version, prefix in ((1, "a"), (2, "b")):
                await bus.publish_many(subjects.verdict_subject("train"), [
                    (v.verdict_id, v) for v in synthetic_verdicts(2, version - 1, (1.0, 0.0), prefix)])
                await until(lambda: version_at_least(bus, version), 60, f"version {version}")
            record = await current_version(bus)
            blob = await fetch_weights(bus, record)
            learn_bus.stopping.set()
    finally:
        await learn_bus.close()
    assert record.version == 2 and record.object_name
    published = load_model(cfg.model)
    install_state(published, decode_state(blob))

    exported = AutoModelForCausalLM.from_pretrained(run / "model", dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(run / "model")
    assert exported.lm_head.weight.data_ptr() == exported.model.embed_tokens.weight.data_ptr()
    assert torch.allclose(_logits(exported), _logits(published), atol=1e-4)
    assert not torch.allclose(_logits(exported), _logits(load_model(cfg.model)), atol=1e-4)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    ids = tokenizer(text, return_tensors="pt").input_ids
    out = exported.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 4

    result = CliRunner().invoke(app, ["export-model", str(run), "--out", str(tmp_path / "v2")])
    assert result.exit_code == 0, result.output
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "v2", dtype=torch.float32).eval()
    assert torch.equal(_logits(again), _logits(exported))


@pytest.mark.unit
def test_export_model_bad_inputs_are_one_line_and_exit_2(tmp_path):
    """No such run, a run without checkpoints, a version not kept: one line each, exit 2;
    the last names the kept versions."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.resolved.json").write_bytes(dump(tiny_run_config(tmp_path)))
    cli = CliRunner()

    def lines(*args):
        result = cli.invoke(app, ["export-model", *args])
        return result.exit_code, result.output.strip().splitlines()

    code, out = lines(str(tmp_path / "nope"))
    assert code == 2 and len(out) == 1 and "no run at" in out[0]
    code, out = lines(str(run))
    assert code == 2 and len(out) == 1 and "no learner checkpoints" in out[0]
    for step, version in ((3, 3), (5, 4)):
        folder = tmp_path / "ckpt" / f"step{step:08d}"
        folder.mkdir(parents=True)
        torch.save({"module": {}, "version": version, "step": step},
                   folder / "mp_rank_00_model_states.pt")
    code, out = lines(str(run), "--version", "7")
    assert code == 2 and len(out) == 1 and "version 7 is not kept; kept versions: 3, 4" in out[0]
