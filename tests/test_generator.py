"""The generator over a real bus: assignments in, attempts out, versions followed.

Runs the generator actor in-process against a real nats-server, with the fake engine (no
model) and with the tiny model (real tokenizer and transformer).
"""

from __future__ import annotations

import math

import anyio
import pytest
import torch

from actors import generator
from bus import subjects
from bus.codec import unpack_f32, unpack_ids
from bus.messages import Attempt, Task, TaskAssignment, Verifier, WeightVersion
from policy.config import GeneratorConfig, ModelConfig, SamplingConfig
from policy.versions import announce, publish_weights
from runtime.config import RunConfig
from tests.conftest import backlog, handled, until

pytestmark = pytest.mark.bus


def make_task(n: int = 0) -> Task:
    return Task(task_id=f"toy/{n}", env="toy", env_version="1", domain="python",
                prompt=f"Write a function f that returns {n}.",
                verifier=Verifier(kind="python_io"), entry_point="f")


def assignment(aid: str, group: int, version: int = 0, purpose: str = "train") -> TaskAssignment:
    return TaskAssignment(assignment_id=aid, task=make_task(), group_size=group,
                          admitted_version=version, purpose=purpose)


async def attempts_on_bus(bus, want: int, timeout_s: float = 60.0) -> list[Attempt]:
    """The attempts stored on whet.v1.attempts, once there are at least `want`."""
    got: list[Attempt] = []

    async def stored() -> bool:
        got[:] = [m for _, m in await bus.snapshot(subjects.STREAM_ATTEMPTS, Attempt)]
        return len(got) >= want

    await until(stored, timeout_s, lambda: f"{want} attempts on the attempts stream (have {len(got)})")
    return got


def fake_config(**sampling) -> RunConfig:
    return RunConfig(generator=GeneratorConfig(
        engine="fake", sampling=SamplingConfig(max_new_tokens=12, **sampling)))


async def test_fake_engine_group_has_ids_versions_and_uniform_logprobs(bus):
    """A group of 4 comes back as 4 attempts with stable ids, version 0 and log(1/16) logprobs."""
    async with anyio.create_task_group() as tg:
        await tg.start(generator.run, bus, fake_config())
        await bus.publish(subjects.TASKS, assignment("a1", 4), msg_id="a1")
        got = await attempts_on_bus(bus, 4)
        # The server already holds each attempt under '<attempt_id>/t0': a copy is a duplicate.
        again = [await bus.publish(subjects.ATTEMPTS, a, msg_id=f"{a.attempt_id}/t0") for a in got]
        bus.stopping.set()
    assert again == [True] * 4
    assert sorted(a.attempt_id for a in got) == ["a1.0", "a1.1", "a1.2", "a1.3"]
    for a in got:
        assert a.group_id == "a1" and a.group_size == 4 and a.policy_version == 0
        turn = a.turns[0]
        ids, logps = unpack_ids(turn.completion_ids), unpack_f32(turn.logprobs)
        assert len(ids) == len(logps) >= 1 and ids.max() < 16 and ids.min() >= 0
        assert logps == pytest.approx(-math.log(16), abs=1e-5)
        assert turn.finish_reason == ("stop" if ids[-1] == 0 else "length")
        assert len(ids) <= 12


async def test_fake_engine_top_p_keeps_a_nucleus(bus):
    """With top_p 0.5 over 16 equal tokens, each sample is drawn from 8: logprob log(1/8)."""
    async with anyio.create_task_group() as tg:
        await tg.start(generator.run, bus, fake_config(top_p=0.5))
        await bus.publish(subjects.TASKS, assignment("a1", 2), msg_id="a1")
        got = await attempts_on_bus(bus, 2)
        bus.stopping.set()
    for a in got:
        assert unpack_f32(a.turns[0].logprobs) == pytest.approx(-math.log(8), abs=1e-5)


async def test_redelivered_assignment_stores_no_second_attempt(bus):
    """The same assignment delivered twice (new msg id) yields the 3 attempts once."""
    async with anyio.create_task_group() as tg:
        await tg.start(generator.run, bus, fake_config())
        await bus.publish(subjects.TASKS, assignment("a1", 3), msg_id="a1")
        await attempts_on_bus(bus, 3)
        await bus.publish(subjects.TASKS, assignment("a1", 3), msg_id="a1-again")
        await bus.publish(subjects.TASKS, assignment("a2", 1), msg_id="a2")
        await handled(bus, subjects.CONSUMER_TASKS)  # both handled and acked: no more to come
        got = await attempts_on_bus(bus, 4)
        bus.stopping.set()
    assert sorted(a.attempt_id for a in got) == ["a1.0", "a1.1", "a1.2", "a2.0"]


async def test_work_waits_for_its_admitted_version(bus):
    """Work admitted at version 2 waits until version 2 is published, then carries it."""
    async with anyio.create_task_group() as tg:
        await tg.start(generator.run, bus, fake_config())
        await announce(bus, WeightVersion(version=1, object_name=""))
        await bus.publish(subjects.TASKS, assignment("early", 1, version=1), msg_id="early")
        await bus.publish(subjects.TASKS, assignment("late", 1, version=2), msg_id="late")
        await bus.publish(subjects.TASKS, assignment("sentinel", 1, version=1), msg_id="sentinel")
        # Handed over after "late", the sentinel is done while "late" is still held, waiting.
        first, sentinel = sorted(await attempts_on_bus(bus, 2), key=lambda a: a.group_id)

        async def only_late_held() -> bool:
            return await backlog(bus, subjects.CONSUMER_TASKS) == (0, 1)

        await until(only_late_held)
        assert len(await attempts_on_bus(bus, 2)) == 2, "late work ran on old weights"
        await publish_weights(bus, 2, b"w" * (3 << 20), step=1, samples=8)
        got = await attempts_on_bus(bus, 3)
        bus.stopping.set()
    versions = {a.group_id: a.policy_version for a in got}
    assert (first.group_id, sentinel.group_id) == ("early", "sentinel")
    assert versions == {"early": 1, "sentinel": 1, "late": 2}
    assert bus.stats.policy_version == 2


async def test_late_generator_starts_on_the_current_version(bus):
    """A generator that starts after version 4 was published runs version 4 from the start."""
    await publish_weights(bus, 4, b"w" * 1000, step=4, samples=32)
    async with anyio.create_task_group() as tg:
        await tg.start(generator.run, bus, fake_config())
        assert bus.stats.policy_version == 4
        await bus.publish(subjects.TASKS, assignment("a1", 1), msg_id="a1")
        [got] = await attempts_on_bus(bus, 1)
        bus.stopping.set()
    assert got.policy_version == 4


async def test_continuation_adds_feedback_turn(bus):
    """A continuation gets a second turn whose context is the feedback, published as /t1."""
    async with anyio.create_task_group() as tg:
        await tg.start(generator.run, bus, fake_config())
        await bus.publish(subjects.TASKS, assignment("a1", 1), msg_id="a1")
        [first] = await attempts_on_bus(bus, 1)
        turns = list(first.turns)
        import msgspec

        turns[-1] = msgspec.structs.replace(turns[-1], feedback="fails test 2")
        await bus.publish(subjects.TURNS, msgspec.structs.replace(first, turns=turns),
                          msg_id="a1.0/fb0")
        got = await attempts_on_bus(bus, 2)
        bus.stopping.set()
    follow = next(a for a in got if len(a.turns) == 2)
    assert follow.attempt_id == "a1.0" and follow.turns[0].feedback == "fails test 2"
    added = unpack_ids(follow.turns[1].prompt_ids).tolist()
    from policy.chat import char_chat_format

    closed = first.turns[0].finish_reason == "stop"
    assert added == char_chat_format(16).feedback_ids("fails test 2", closed)


def tiny_config(**sampling) -> RunConfig:
    return RunConfig(model=ModelConfig(name="tiny"), generator=GeneratorConfig(
        engine="torch", dtype="float32", sampling=SamplingConfig(max_new_tokens=10, **sampling)))


async def test_tiny_model_logprobs_match_a_teacher_forced_pass(bus):
    """Logprobs reported by the tiny model equal log_softmax(logits / T) recomputed afterwards."""
    cfg = tiny_config(temperature=0.7)
    async with anyio.create_task_group() as tg:
        await tg.start(generator.run, bus, cfg)
        await bus.publish(subjects.TASKS, assignment("a1", 3), msg_id="a1")
        got = await attempts_on_bus(bus, 3)
        bus.stopping.set()
    from policy.model import load_model

    model = load_model(cfg.model, "float32")
    for a in got:
        turn = a.turns[0]
        prompt, ids = unpack_ids(turn.prompt_ids).tolist(), unpack_ids(turn.completion_ids).tolist()
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids])).logits[0].float()
        logp = torch.log_softmax(logits / 0.7, -1)
        expected = [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(ids)]
        assert unpack_f32(turn.logprobs).tolist() == pytest.approx(expected, abs=2e-3)


async def test_eval_work_is_sampled_greedily(bus):
    """Eval work uses eval sampling (greedy): the fake engine's argmax is id 0, the end of
    the turn, so every eval attempt stops at once with the untempered log(1/16)."""
    async with anyio.create_task_group() as tg:
        await tg.start(generator.run, bus, fake_config())
        await bus.publish(subjects.TASKS, assignment("e1", 3, purpose="eval"), msg_id="e1")
        got = await attempts_on_bus(bus, 3)
        bus.stopping.set()
    for a in got:
        assert a.purpose == "eval"
        assert unpack_ids(a.turns[0].completion_ids).tolist() == [0]
        assert a.turns[0].finish_reason == "stop"
        assert unpack_f32(a.turns[0].logprobs) == pytest.approx(-math.log(16), abs=1e-5)


async def test_eval_rows_in_float32_run_apart_from_bf16_training_rows():
    """A bf16 engine asked for float32 eval rows loads a float32 copy, never mixes the two in
    a batch, and keeps both on the current weights: greedy eval logprobs equal a float32
    teacher-forced pass of the installed weights (tighter than bf16 could)."""
    from policy.engine import RowSettings, SampleRequest
    from policy.model import load_model
    from policy.torch_engine import TorchEngine
    from policy.weights import encode_parts

    engine = TorchEngine(GeneratorConfig(engine="torch", dtype="bfloat16"), ModelConfig(name="tiny"), 0)
    trained = load_model(ModelConfig(name="tiny"), "float32")
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p) * 0.05, alpha=1.0)
            p.copy_(p.to(torch.bfloat16).float())  # weights travel in bf16
    engine.apply_weights(b"".join(bytes(p) for p in encode_parts(trained.state_dict())))
    prompt = engine.chat.prompt_ids("Write f.")
    exact = RowSettings(0.0, 1.0, 6, dtype="float32")
    async with anyio.create_task_group() as tg:
        await tg.start(engine.serve)
        train, evaluated = [], []

        async def ask(settings, out):
            out += await engine.generate(SampleRequest(prompt, 2, settings))
        async with anyio.create_task_group() as both:
            both.start_soon(ask, RowSettings(1.0, 1.0, 6), train)
            both.start_soon(ask, exact, evaluated)
        tg.cancel_scope.cancel()
    assert set(engine.models) == {"bfloat16", "float32"}
    ids = evaluated[0].token_ids
    with torch.no_grad():
        logp = torch.log_softmax(trained(torch.tensor([prompt + ids])).logits[0].float(), -1)
    expected = [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(ids)]
    assert evaluated[0].logprobs == pytest.approx(expected, abs=1e-4)
    assert evaluated[0].token_ids == evaluated[1].token_ids and len(train) == 2


async def test_a_round_samples_its_own_version_while_the_live_weights_move_on(bus):
    """Round work names its version: after versions 1 and 2 are announced, a round of version
    1 (on whet.v1.rounds) is sampled from a copy pinned at version 1, the weights of version
    1's object, and a round of version 0 from the initial weights, while training work runs
    on version 2."""
    async with anyio.create_task_group() as tg:
        await tg.start(generator.run, bus, fake_config())
        await publish_weights(bus, 1, b"1" * 5000, step=1, samples=8)
        await publish_weights(bus, 2, b"2" * 7000, step=2, samples=16)
        await bus.publish(subjects.TASKS, assignment("t1", 2, version=2), msg_id="t1")
        trained = await attempts_on_bus(bus, 2)
        await bus.publish(subjects.ROUNDS, assignment("r1", 2, version=1, purpose="eval"),
                          msg_id="r1")
        await bus.publish(subjects.ROUNDS, assignment("r0", 1, version=0, purpose="eval"),
                          msg_id="r0")
        got = {a.attempt_id: a for a in await attempts_on_bus(bus, 5)}
        bus.stopping.set()
    assert {a.policy_version for a in trained} == {2}
    assert [got[f"r1.{i}"].policy_version for i in range(2)] == [1, 1]
    assert got["r0.0"].policy_version == 0
    assert all(got[k].turns[0].policy_version == got[k].policy_version for k in got)


async def test_pinned_rows_sample_the_pinned_weights_not_the_live_ones():
    """The torch engine's copy pinned at version 0 keeps the initial weights after others are
    installed: its greedy logprobs equal a float32 pass of the initial model, the live rows'
    a pass of the new weights, and each sample carries its own version."""
    from policy.engine import RowSettings, SampleRequest
    from policy.model import load_model
    from policy.torch_engine import TorchEngine
    from policy.weights import encode_parts

    engine = TorchEngine(GeneratorConfig(engine="torch", dtype="float32"), ModelConfig(name="tiny"), 0)
    initial = load_model(ModelConfig(name="tiny"), "float32")
    trained = load_model(ModelConfig(name="tiny"), "float32")
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p) * 0.05)
            p.copy_(p.to(torch.bfloat16).float())  # weights travel in bf16
    prompt = engine.chat.prompt_ids("Write f.")
    async with anyio.create_task_group() as tg:
        await tg.start(engine.serve)
        await engine.pin(0, None, "float32")
        await engine.load_weights(3, b"".join(bytes(p) for p in encode_parts(trained.state_dict())))
        [old] = await engine.generate(SampleRequest(prompt, 1, RowSettings(0.0, 1.0, 6, pinned=0)))
        [new] = await engine.generate(SampleRequest(prompt, 1, RowSettings(0.0, 1.0, 6)))
        tg.cancel_scope.cancel()

    def teacher_forced(model, ids):
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([prompt + ids])).logits[0].float(), -1)
        return [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(ids)]

    assert (old.policy_version, new.policy_version) == (0, 3)
    assert old.logprobs == pytest.approx(teacher_forced(initial, old.token_ids), abs=1e-4)
    assert new.logprobs == pytest.approx(teacher_forced(trained, new.token_ids), abs=1e-4)
    assert engine.pinned_versions == {0}


async def test_the_final_round_gets_every_core_once_the_learner_is_done(bus):
    """Once the announced version carries the last step (`training.max_steps`), the next
    assignment raises the engine's threads to every core the process may use; before, not."""
    import os

    import msgspec
    import structlog

    cfg = fake_config()
    cfg = msgspec.structs.replace(cfg, training=msgspec.structs.replace(cfg.training, max_steps=2))
    with structlog.testing.capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            await tg.start(generator.run, bus, cfg)
            await publish_weights(bus, 1, b"1" * 100, step=1, samples=8)
            await bus.publish(subjects.TASKS, assignment("t1", 1, version=1), msg_id="t1")
            await attempts_on_bus(bus, 1)
            raised_early = [e for e in logs if e["event"] == "generator.threads_raised"]
            await publish_weights(bus, 2, b"2" * 100, step=2, samples=16)
            await bus.publish(subjects.ROUNDS, assignment("r2", 1, version=2, purpose="eval"),
                              msg_id="r2")
            await attempts_on_bus(bus, 2)
            bus.stopping.set()
    assert raised_early == []
    [raised] = [e for e in logs if e["event"] == "generator.threads_raised"]
    assert raised["threads"] == len(os.sched_getaffinity(0))


@pytest.mark.bus
async def test_a_follower_started_after_a_rounds_version_pins_it_by_its_object(bus):
    """Versions 1 and 2 are announced before the follower starts (a generator restarted
    mid-round sees only the newest): pinning version 1 for a round fetches version 1's own
    object at once, not after waiting for an announcement that will never come."""
    from policy.fake_engine import FakeEngine
    from policy.follower import WeightFollower

    await publish_weights(bus, 1, b"one-" * 10, step=1, samples=4)
    await publish_weights(bus, 2, b"two-two-" * 10, step=2, samples=8)
    engine = FakeEngine(GeneratorConfig(), seed=0)
    follower = WeightFollower(bus, engine)
    async with anyio.create_task_group() as tg:
        await tg.start(follower.run)
        assert (engine.version, engine.weight_bytes) == (2, 80)
        with anyio.fail_after(10):  # far below the round's weights wait
            await follower.pin_round(1, "", timeout_s=300)
        assert 1 in engine.pinned_versions and engine.pinned_bytes == 40
        tg.cancel_scope.cancel()


@pytest.mark.bus
async def test_a_follower_started_after_a_renumbered_rounds_version_pins_its_weights(bus):
    """Version 2 trained nothing and was announced as version 1's weights renumbered (no object
    of its own), then version 3 came, all before the follower started: pinning version 2 for a
    round reads version 1's object through version 2's own record. A guess by version number
    found no object and left the round's work failing until dead-lettered (cluster chaos)."""
    from policy.fake_engine import FakeEngine
    from policy.follower import WeightFollower
    from policy.publisher import Publisher

    publisher = Publisher(bus, keep=3)
    await publisher.publish(1, [memoryview(b"one-" * 10)], step=1, samples=4)
    await publisher.publish(2, None, step=2, samples=4)
    await publisher.publish(3, [memoryview(b"three-" * 10)], step=3, samples=8)
    engine = FakeEngine(GeneratorConfig(), seed=0)
    follower = WeightFollower(bus, engine)
    async with anyio.create_task_group() as tg:
        await tg.start(follower.run)
        assert engine.version == 3 and 2 not in follower.seen
        with anyio.fail_after(10):
            await follower.pin_round(2, "", timeout_s=300)
        assert 2 in engine.pinned_versions and engine.pinned_bytes == 40
        tg.cancel_scope.cancel()


def test_rows_that_finish_leave_the_batch_and_the_others_decode_as_alone():
    """Eight greedy float32 rows of different prompts, four of them done within 4 tokens:
    once they are done the batch shrinks, and every row's tokens and logprobs equal those
    of the same row decoded alone."""
    from policy.engine import RowSettings
    from policy.model import load_model
    from policy.torch_engine import TorchEngine
    from policy.weights import encode_parts

    engine = TorchEngine(GeneratorConfig(engine="torch", dtype="float32"), ModelConfig(name="tiny"), 0)
    trained = load_model(ModelConfig(name="tiny"), "float32")
    torch.manual_seed(0)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    engine.apply_weights(b"".join(bytes(p) for p in encode_parts(trained.state_dict())))
    contexts = [engine.chat.prompt_ids("Write f." + " please" * i) for i in range(8)]
    settings = [RowSettings(0.0, 1.0, n) for n in (2, 3, 4, 4, 10, 10, 10, 10)]
    rows_seen: list[int] = []
    model = engine._model("float32")
    hook = model.register_forward_pre_hook(
        lambda _m, args, kwargs: rows_seen.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    together = engine.run_rows(contexts, settings)
    hook.remove()
    alone = [engine.run_rows([c], [s])[0] for c, s in zip(contexts, settings)]
    assert rows_seen[0] == 8 and min(rows_seen) == 4
    assert [len(r.token_ids) for r in together] == [2, 3, 4, 4, 10, 10, 10, 10]
    for t, a in zip(together, alone):
        assert t.token_ids == a.token_ids
        assert t.logprobs == pytest.approx(a.logprobs, abs=1e-4)
