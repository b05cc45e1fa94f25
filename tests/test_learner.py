"""The learner over a real bus with the tiny model: verdicts in, new versions out.

Verdicts are built here as a judge would build them; the learner and a generator each get
their own connection to a real nats-server.
"""

from __future__ import annotations

import anyio
import msgspec
import pytest
import structlog
import structlog.testing
import torch

from actors import generator, learner
from bus import subjects
from bus.codec import unpack_f32, unpack_ids
from bus.messages import Attempt, EvaluatorState, StepRecord, Verdict, WeightVersion
from bus.nats_bus import Bus, Identity
from policy.config import GeneratorConfig, LearnerConfig, ModelConfig, SamplingConfig
from policy.versions import current_version, fetch_weights
from envs.config import EvaluatorConfig
from runtime.config import ActorsConfig, RunConfig, TrainingConfig
from tests.conftest import bus_settings, patiently, until
from tests.test_generator import assignment, attempts_on_bus


def verdict_for(attempt: Attempt, reward: float) -> Verdict:
    """What a judge would send for `attempt`: pass at reward 1, fail otherwise."""
    return Verdict(verdict_id=attempt.attempt_id, attempt=attempt,
                   outcome="pass" if reward >= 1 else "fail", reward=reward,
                   components={"tests": reward}, judge="test-judge")


def tiny_run_config(tmp_path, **training) -> RunConfig:
    return RunConfig(
        model=ModelConfig(name="tiny"),
        generator=GeneratorConfig(engine="torch", dtype="float32",
                                  sampling=SamplingConfig(max_new_tokens=8)),
        learner=LearnerConfig(lr=1e-2, micro_batch_size=4, checkpoint_dir=str(tmp_path / "ckpt")),
        training=TrainingConfig(**{"batch_size": 8, "group_size": 4, **training}))


async def second_bus(nats_server, kind: str) -> Bus:
    return await Bus.connect(bus_settings(nats_server.url), Identity(kind, f"{kind}-1"))


async def version_at_least(bus: Bus, version: int) -> bool:
    return (await current_version(bus)).version >= version


async def step_recorded(bus: Bus, step: int) -> bool:
    """Whether the learner's typed record of `step` is in the run's KV."""
    return await bus.kv_get(subjects.BUCKET_RUN, subjects.step_key(step), StepRecord) is not None


async def sample_after_one_version(bus, gen_bus) -> list:
    """With a learner and a generator running: two groups of 4 judged make version 1; once
    the generator runs it, a group of 2 admitted at version 1 is sampled; returns those 2."""
    for g in ("g1", "g2"):
        await bus.publish(subjects.TASKS, assignment(g, 4), msg_id=g)
    for a in await attempts_on_bus(bus, 8):
        await bus.publish(subjects.verdict_subject("train"),
                          verdict_for(a, float(a.index % 2)), msg_id=a.attempt_id)
    await until(lambda: gen_bus.stats.policy_version >= 1, 120, "the generator on version 1")
    await bus.publish(subjects.TASKS, assignment("g3", 2, version=1), msg_id="g3")
    return [a for a in await attempts_on_bus(bus, 10) if a.group_id == "g3"]


@pytest.mark.bus
async def test_learner_publishes_a_version_the_generator_then_samples_with(bus, nats_server, tmp_path):
    """8 judged attempts make version 1; the generator loads it and its next attempts carry
    version 1 with logprobs of the published weights, not the initial ones."""
    cfg = tiny_run_config(tmp_path)
    gen_bus, learn_bus = await second_bus(nats_server, "generator"), await second_bus(nats_server, "learner")
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(learner.run, learn_bus, cfg)
            await tg.start(generator.run, gen_bus, cfg)
            got = await sample_after_one_version(bus, gen_bus)
            record = await current_version(bus)
            blob = await fetch_weights(bus, record)
            gen_bus.stopping.set()
            learn_bus.stopping.set()
    finally:
        await gen_bus.close()
        await learn_bus.close()
    assert record.version == 1 and record.samples == 8 and record.dtype == "bfloat16"
    assert [a.policy_version for a in got] == [1, 1]
    from policy.model import load_model
    from policy.weights import decode_state, install_state

    trained, initial = load_model(cfg.model), load_model(cfg.model)
    install_state(trained, decode_state(blob))
    turn = got[0].turns[0]
    prompt, ids = unpack_ids(turn.prompt_ids).tolist(), unpack_ids(turn.completion_ids).tolist()
    reported = torch.tensor(unpack_f32(turn.logprobs).tolist())

    def recomputed(model):
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([prompt + ids])).logits[0].float(), -1)
        return torch.tensor([logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(ids)])

    assert torch.allclose(reported, recomputed(trained), atol=2e-3)
    assert not torch.allclose(reported, recomputed(initial), atol=2e-3)


@pytest.mark.bus
async def test_sync_mode_advances_every_batch_and_rejects_off_policy_samples(bus, nats_server, tmp_path):
    """Sync mode: a batch without signal still yields the next version (same weights); a
    batch sampled by an older version is rejected and counted; an on-policy batch trains."""
    from tests.test_learner_crash import synthetic_verdicts

    cfg = tiny_run_config(tmp_path, mode="sync", batch_size=4, group_size=2)
    learn_bus = await second_bus(nats_server, "learner")

    async def feed_and_wait(verdicts, version):
        await bus.publish_many(subjects.verdict_subject("train"),
                               [(v.verdict_id, v) for v in verdicts])
        async def published() -> bool:
            return (learn_bus.stats.gauges.get("step", 0) >= version
                    and (await current_version(bus)).version >= version)

        await until(published, 60, f"learner step and published version {version}")
        return await current_version(bus), dict(learn_bus.stats.gauges)

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(learner.run, learn_bus, cfg)
            v1, g1 = await feed_and_wait(synthetic_verdicts(2, 0, (1.0, 1.0), "same"), 1)
            v2, g2 = await feed_and_wait(synthetic_verdicts(2, 0, (1.0, 0.0), "old"), 2)
            v3, g3 = await feed_and_wait(synthetic_verdicts(2, 2, (1.0, 0.0), "new"), 3)
            learn_bus.stopping.set()
    finally:
        await learn_bus.close()
    assert (v1.object_name, g1["samples"], g1["no_signal"]) == ("", 0, 4)
    assert (v2.object_name, g2["samples"], g2["stale_rejected"]) == ("", 0, 4)
    assert (v3.object_name, g3["samples"], g3["stale_rejected"]) == ("policy-v00000003", 4, 0)
    assert g3["pass_rate"] == 0.5 and g3["mean_reward"] == 0.5


@pytest.mark.bus
async def test_async_batch_without_signal_still_moves_the_version(bus, nats_server, tmp_path):
    """Async mode: a batch with nothing to train is announced as the next version (the same
    weights), so the sampler's budget of (version + staleness + 1) * batch_size keeps moving;
    the next batch with signal publishes trained weights."""
    from tests.test_learner_crash import synthetic_verdicts

    cfg = tiny_run_config(tmp_path, mode="async", batch_size=4, group_size=2, max_staleness=2)
    learn_bus = await second_bus(nats_server, "learner")
    versions = []
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(learner.run, learn_bus, cfg)
            for prefix, rewards, version in (("same", (1.0, 1.0), 1), ("mixed", (1.0, 0.0), 2)):
                await bus.publish_many(subjects.verdict_subject("train"), [
                    (v.verdict_id, v) for v in synthetic_verdicts(2, 0, rewards, prefix)])
                await until(lambda: version_at_least(bus, version), 60, f"version {version}")
                versions.append(await current_version(bus))
            learn_bus.stopping.set()
    finally:
        await learn_bus.close()
    assert [(v.version, v.object_name, v.samples) for v in versions] == [
        (1, "", 0), (2, "policy-v00000002", 4)]


@pytest.mark.bus
@pytest.mark.parametrize("zero_signal, first_step", [
    ("drop", {"groups": 2, "samples": 0, "no_signal": 4}),
    ("refill", {"groups": 4, "samples": 4, "no_signal": 4})])
async def test_refill_waits_for_groups_with_signal(bus, nats_server, tmp_path, zero_signal,
                                                   first_step):
    """Batch 4 of groups of 2: two groups without signal, then two with. Dropping trains the
    first two as a batch of nothing; refill waits and trains all four in one step."""
    from tests.test_learner_crash import synthetic_verdicts

    cfg = tiny_run_config(tmp_path, batch_size=4, group_size=2, zero_signal=zero_signal)
    learn_bus = await second_bus(nats_server, "learner")
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(learner.run, learn_bus, cfg)
            await bus.publish_many(subjects.verdict_subject("train"), [
                (v.verdict_id, v) for v in synthetic_verdicts(2, 0, (1.0, 1.0), "same")
                + synthetic_verdicts(2, 0, (1.0, 0.0), "mixed")])
            await until(lambda: step_recorded(bus, 1), 60, "step 1's record in KV")
            record = await bus.kv_get(subjects.BUCKET_RUN, subjects.step_key(1), StepRecord)
            learn_bus.stopping.set()
    finally:
        await learn_bus.close()
    assert {k: getattr(record, k) for k in first_step} == first_step


@pytest.mark.bus
async def test_learner_holds_past_an_evaluated_version_until_its_round_is_reported(bus, nats_server, tmp_path):
    """With an evaluator in the stack evaluating every version, the learner trains its batch
    but publishes version 1 only once the evaluator's KV state says round 0 is reported, so
    the round's attempts all come from version 0; its watch of that state rides through a
    restart of the server during the hold. The step's typed record is in KV after."""
    from tests.test_learner_crash import synthetic_verdicts

    cfg = msgspec.structs.replace(
        tiny_run_config(tmp_path, mode="async", batch_size=4, group_size=2),
        actors=ActorsConfig(count={"evaluator": 1}),
        evaluator=EvaluatorConfig(every_versions=1, hold_learner=True))
    learn_bus = await second_bus(nats_server, "learner")
    with structlog.testing.capture_logs() as logs:
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(learner.run, learn_bus, cfg)
                await bus.publish_many(subjects.verdict_subject("train"), [
                    (v.verdict_id, v) for v in synthetic_verdicts(2, 0, (1.0, 0.0), "held")])
                await until(lambda: any(e["event"] == "learner.holding_for_eval" for e in logs),
                            60, "learner.holding_for_eval logged")
                await bus.kv_put(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE,
                                 EvaluatorState(last_round=0, last_reported=-1))
                nats_server.kill()
                nats_server.start()
                held = await patiently(lambda: current_version(bus))
                await bus.kv_put(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE,
                                 EvaluatorState(last_round=0, last_reported=0))
                await until(lambda: version_at_least(bus, 1), 60, "version 1 released")
                released = await current_version(bus)
                await until(lambda: step_recorded(bus, 1), 30, "step 1's record in KV")
                record = await bus.kv_get(subjects.BUCKET_RUN, subjects.step_key(1), StepRecord)
                learn_bus.stopping.set()
        finally:
            await learn_bus.close()
    assert held is not None and held.version == 0
    assert (released.version, released.samples) == (1, 4)
    [done] = [e for e in logs if e["event"] == "learner.held_for_eval"]
    assert done["reported"] is True and done["policy_version"] == 0
    assert (record.step, record.policy_version, record.samples) == (1, 1, 4)
    assert record.held_for_eval_s == done["seconds"] and record.loss is not None


@pytest.mark.bus
async def test_member_arriving_after_its_group_was_trained_is_dropped_and_named(bus, nats_server, tmp_path):
    """A group that timed out is trained with the members it had; a member arriving later is
    acked untrained and logged as late (not as a duplicate), so its fate is known."""
    from structlog.testing import capture_logs

    from tests.test_learner_crash import synthetic_verdicts

    cfg = tiny_run_config(tmp_path, mode="async", batch_size=2, group_size=2)
    cfg = msgspec.structs.replace(cfg, learner=msgspec.structs.replace(cfg.learner,
                                                                       group_timeout_s=1.0))
    first, late = synthetic_verdicts(1, 0, (1.0, 0.0), "g")
    learn_bus = await second_bus(nats_server, "learner")
    try:
        with capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                await tg.start(learner.run, learn_bus, cfg)
                await bus.publish(subjects.verdict_subject("train"), first, msg_id=first.verdict_id)
                await until(lambda: learn_bus.stats.gauges.get("step", 0) >= 1, 60, "learner step 1")
                await bus.publish(subjects.verdict_subject("train"), late, msg_id=late.verdict_id)
                await until(lambda: any(e["event"] == "learner.late_member_dropped" for e in logs),
                            30, "learner.late_member_dropped logged")
                learn_bus.stopping.set()
    finally:
        await learn_bus.close()
    [step] = [e for e in logs if e["event"] == "learner.step_completed"]
    assert step["trained"] == [] and step["left_out"] == {"no_signal": ["g0.0"]}
    [dropped] = [e for e in logs if e["event"] == "learner.late_member_dropped"]
    assert (dropped["verdict_id"], dropped["group_id"]) == ("g0.1", "g0")
    assert not any(e["event"] == "learner.duplicate_skipped" for e in logs)
    [state] = await bus.stream_states([subjects.STREAM_VERDICTS])
    backlog = state.consumers[subjects.CONSUMER_LEARNER.durable]
    assert (backlog["pending"], backlog["in_flight"]) == (0, 0)


@pytest.mark.bus
async def test_two_rank_zero2_learner_trains_and_checkpoints_both_shards(bus, nats_server, tmp_path):
    """world_size 2, ZeRO-2: a second rank process joins, one batch makes version 1, and the
    checkpoint holds optimizer shards of both ranks."""
    from tests.test_learner_crash import synthetic_verdicts

    cfg = tiny_run_config(tmp_path, batch_size=4, group_size=2)
    cfg = msgspec.structs.replace(cfg, learner=msgspec.structs.replace(
        cfg.learner, world_size=2, zero_stage=2, micro_batch_size=1))
    learn_bus = await second_bus(nats_server, "learner")
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(learner.run, learn_bus, cfg)
            await bus.publish_many(subjects.verdict_subject("train"),
                                   [(v.verdict_id, v) for v in synthetic_verdicts(2)])
            await until(lambda: learn_bus.stats.gauges.get("step", 0) >= 1, 120, "learner step 1")
            gauges = dict(learn_bus.stats.gauges)
            learn_bus.stopping.set()
    finally:
        await learn_bus.close()
    assert gauges["samples"] == 4 and gauges["tokens"] == 48
    assert (await current_version(bus)).object_name == "policy-v00000001"
    shards = sorted(p.name for p in (tmp_path / "ckpt").glob("step*/*optim_states.pt"))
    assert [s[:19] for s in shards] == ["bf16_zero_pp_rank_0", "bf16_zero_pp_rank_1"], shards


@pytest.mark.bus
async def test_fresh_learner_joining_a_trained_run_announces_its_own_initial_weights(bus, nats_server, tmp_path):
    """KV already names trained weights (version 5) but this learner has no checkpoint: it
    announces version 6 as the initial weights (object ''), never renumbering weights it
    does not hold."""
    from policy.versions import publish_weights

    await publish_weights(bus, 5, b"someone else's weights", step=5, samples=40)
    learn_bus = await second_bus(nats_server, "learner")
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(learner.run, learn_bus, tiny_run_config(tmp_path))
            record = await current_version(bus)
            learn_bus.stopping.set()
    finally:
        await learn_bus.close()
    assert (record.version, record.object_name) == (6, "")


@pytest.mark.bus
async def test_trainer_minibatches_and_kl_to_the_reference(tmp_path):
    """Two minibatches make two optimizer steps per batch (clipped against the proximal
    policy); the KL to the initial policy starts near 0 and grows as the policy moves."""
    import numpy as np

    from policy.batch import TrainSample
    from policy.ranks import RankGroup

    cfg = tiny_run_config(tmp_path)
    cfg = msgspec.structs.replace(cfg, learner=msgspec.structs.replace(
        cfg.learner, minibatches=2, kl_coef=0.1, correction="decoupled", lr=0.05,
        precision="fp32"))
    rng = np.random.default_rng(0)
    samples = [TrainSample(f"v{i}", "g", 0, float(i % 2) * 2 - 1,
                           rng.integers(3, 49152, 24).astype(np.int64),
                           np.r_[np.zeros(8, bool), np.ones(16, bool)],
                           np.r_[np.zeros(8, np.float32), np.full(16, -10.8, np.float32)])
               for i in range(4)]
    ranks = RankGroup(cfg.trainer, tmp_path / "ckpt")
    await ranks.start()
    try:
        first = await ranks.call("train", samples)
        for _ in range(3):
            last = await ranks.call("train", samples)
    finally:
        await ranks.close()
    assert first["optimizer_steps"] == 2 and last["optimizer_steps"] == 8
    assert 0 <= first["kl"] < last["kl"] / 4
    assert first["tokens"] == 4 * 16 and first["clip_frac"] > 0
    # Behaviour logprobs are uniform's (-10.8); as the policy moves away, decoupled masks more.
    assert 0 <= first["masked_frac"] < last["masked_frac"] < 1


@pytest.mark.bus
async def test_icepop_masks_tokens_the_behaviour_policy_found_far_likelier(tmp_path):
    """The tiny model starts near uniform (logprob -10.8 per token). Half the tokens claim a
    behaviour logprob of -8.8: their ratio e^-2 (0.14) is under mask_low 0.5, so they are
    masked, and the step reports masked_frac 0.5; truncated masks none."""
    import numpy as np

    from policy.batch import TrainSample
    from policy.ranks import RankGroup

    behav = np.r_[np.zeros(8, np.float32), np.tile(np.float32([-10.8, -8.8]), 8)]
    rng = np.random.default_rng(0)
    samples = [TrainSample(f"v{i}", "g", 0, float(i % 2) * 2 - 1,
                           rng.integers(3, 49152, 24).astype(np.int64),
                           np.r_[np.zeros(8, bool), np.ones(16, bool)], behav)
               for i in range(4)]
    cfg = tiny_run_config(tmp_path)
    masked = {}
    for mode in ("icepop", "truncated"):
        lc = msgspec.structs.replace(cfg.learner, correction=mode, mask_low=0.5, is_clip=2.0,
                                     precision="fp32")
        ranks = RankGroup(msgspec.structs.replace(cfg, learner=lc).trainer, tmp_path / mode)
        await ranks.start()
        try:
            masked[mode] = (await ranks.call("train", samples))["masked_frac"]
        finally:
            await ranks.close()
    assert masked == {"icepop": 0.5, "truncated": 0.0}


@pytest.mark.bus
async def test_loss_divisor_scales_the_gradient_of_a_step(tmp_path):
    """The same batch at (nearly) the same weights: against the token mean over its 64
    trained tokens, batch_tokens of 256 (zero-signal tokens counted) gives a quarter of the
    gradient norm and constant 8 x 16 (batch_size x max_new_tokens) a half."""
    import numpy as np

    from policy.batch import TrainSample
    from policy.ranks import RankGroup

    rng = np.random.default_rng(0)
    samples = [TrainSample(f"v{i}", "g", 0, float(i % 2) * 2 - 1,
                           rng.integers(3, 49152, 24).astype(np.int64),
                           np.r_[np.zeros(8, bool), np.ones(16, bool)],
                           np.r_[np.zeros(8, np.float32), np.full(16, -10.8, np.float32)])
               for i in range(4)]
    cfg = tiny_run_config(tmp_path)
    cfg = msgspec.structs.replace(
        cfg, generator=msgspec.structs.replace(cfg.generator, sampling=SamplingConfig(
            max_new_tokens=16)),
        learner=msgspec.structs.replace(cfg.learner, lr=1e-12, precision="fp32"))
    ranks = RankGroup(cfg.trainer, tmp_path / "ckpt")
    await ranks.start()
    norms = {}
    try:
        for divisor in ("tokens", "batch_tokens", "constant"):
            ranks.trainer.lc = msgspec.structs.replace(cfg.learner, loss_divisor=divisor)
            norms[divisor] = (await ranks.call("train", samples, 256))["grad_norm"]
    finally:
        await ranks.close()
    assert norms["tokens"] > 0
    assert norms["batch_tokens"] == pytest.approx(norms["tokens"] / 4, rel=1e-3)
    assert norms["constant"] == pytest.approx(norms["tokens"] / 2, rel=1e-3)


@pytest.mark.bus
async def test_master_weights_start_from_the_float32_checkpoint_when_asked(tmp_path):
    """bf16: DeepSpeed's master copy starts as the bf16 rounding of the tiny model's float32
    weights (on the bf16 grid); with master_from_checkpoint it holds the float32 weights
    themselves, while the bf16 module is the same rounding either way."""
    from deepspeed.utils import safe_get_full_fp32_param

    from policy.model import load_model
    from policy.ranks import RankGroup

    exact = {n: p.detach().clone() for n, p in load_model(ModelConfig(name="tiny"),
                                                           "float32").named_parameters()}
    cfg = tiny_run_config(tmp_path)
    seen = {}
    for flag in (False, True):
        lc = msgspec.structs.replace(cfg.learner, precision="bf16", lr=1e-6,
                                     master_from_checkpoint=flag)
        ranks = RankGroup(msgspec.structs.replace(cfg, learner=lc).trainer, tmp_path / str(flag))
        await ranks.start()
        try:
            params = dict(ranks.trainer.engine.module.named_parameters())
            seen[flag] = {n: (safe_get_full_fp32_param(p).detach().clone(),
                              p.detach().clone()) for n, p in params.items()}
        finally:
            await ranks.close()
    name = next(n for n in exact if exact[n].ndim == 2)
    w = exact[name]
    grid = w.to(torch.bfloat16)
    (off_master, off_module), (on_master, on_module) = seen[False][name], seen[True][name]
    assert torch.equal(off_master, grid.float()) and not torch.equal(off_master, w)
    assert torch.equal(on_master, w)
    assert torch.equal(on_module, grid) and torch.equal(off_module, grid)
