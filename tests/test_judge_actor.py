"""The judge actor over a real nats-server, with the real executor actor running real sandboxes."""

from __future__ import annotations

import contextlib

import anyio
import msgspec
import pytest
import structlog

from actors import executor as executor_actor
from actors import judge as judge_actor
from sandbox.config import ExecutorConfig
from bus import subjects
from bus.codec import decode
from bus.messages import Attempt, DeadLetter, Verdict, Verifier
from judging.config import JudgeConfig
from runtime.config import RunConfig, SupervisorConfig
from sandbox.config import SandboxConfig
from tests.conftest import handled
from tests.support.judging import attempt, backend, humaneval, io_task  # noqa: F401
from tests.test_judge_kinds import PROFILE

pytestmark = pytest.mark.bus


def config(sandbox: SandboxConfig = SandboxConfig(backend="subprocess"), **judge) -> RunConfig:
    return RunConfig(judge=JudgeConfig(**judge), supervisor=SupervisorConfig(drain_s=3),
                     executor=ExecutorConfig(sandbox=sandbox, concurrency=4, avoid_delay_s=0.1))


@contextlib.asynccontextmanager
async def actors(bus, cfg: RunConfig):
    """The judge and an executor serving on `bus` until the block ends."""
    with structlog.testing.capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            await tg.start(judge_actor.run, bus, cfg)
            await tg.start(executor_actor.run, bus, cfg)
            yield logs
            bus.stopping.set()


async def verdicts(bus, count: int, timeout_s: float = 60) -> list[tuple[str, Verdict]]:
    """The first `count` verdicts stored, with their subjects."""
    found = []
    with anyio.fail_after(timeout_s):
        async for subject, verdict, _ in bus.replay(subjects.STREAM_VERDICTS, f"{subjects.VERDICTS}.>", Verdict):
            found.append((subject, verdict))
            if len(found) == count:
                return found
    return found


async def stored_verdicts(bus) -> list[Verdict]:
    return [v async for _, v, _ in bus.replay(subjects.STREAM_VERDICTS, f"{subjects.VERDICTS}.>",
                                              Verdict, follow=False)]


async def all_handled(bus) -> None:
    """Wait until the judge and the executor have handled and acked everything sent to them
    (checked in pipeline order, so work moving on is not missed): nothing more can come."""
    await handled(bus, subjects.CONSUMER_ATTEMPTS, subjects.CONSUMER_EXEC,
                  subjects.CONSUMER_EXEC_DONE, timeout_s=60)


async def take_one(bus, spec: subjects.ConsumerSpec, cls, timeout_s: float = 60):
    """The next message of a work queue, read (and acked) as its consumer would."""
    await bus.ensure_consumer(spec)
    sub = await bus.js.pull_subscribe_bind(durable=spec.durable, stream=spec.stream)
    with anyio.fail_after(timeout_s):
        while True:
            try:
                [msg] = await sub.fetch(1, timeout=1.0)
            except TimeoutError:
                continue
            await msg.ack()
            assert msg.headers["Nats-Msg-Id"] == "m1.0/t2"
            return decode(msg.data, cls)


async def publish(bus, *attempts: Attempt, msg_id: str = "") -> None:
    for a in attempts:
        await bus.publish(subjects.ATTEMPTS, a, msg_id=msg_id or a.attempt_id)


async def test_attempts_become_verdicts_with_every_field(bus, backend):
    """Pass, fail, compile error, structured, hack and eval attempts each get one full verdict."""
    he = humaneval()
    add = he["HumanEval/53"]
    batch = [attempt(add, "    return x + y\n", attempt_id="g1.0"),
             attempt(add, "    return None\n", attempt_id="g1.1"),
             attempt(add, "    return (x +\n", attempt_id="g1.2"),
             attempt(PROFILE, '{"name": "Ada", "langs": ["python"], "email": "ada@b.org"}', attempt_id="g2.0"),
             attempt(add, "    import os\n    os._exit(0)\n", attempt_id="g1.3"),
             attempt(add, "    return x + y\n", attempt_id="e1.0", purpose="eval")]
    async with actors(bus, config()) as logs:
        await publish(bus, *batch)
        await publish(bus, batch[0], msg_id="g1.0-redelivered")
        got = {v.verdict_id: (subject, v) for subject, v in await verdicts(bus, len(batch))}
        await all_handled(bus)  # the copy of g1.0 too: no second verdict can come now
    assert set(got) == {a.attempt_id for a in batch}
    assert len(await stored_verdicts(bus)) == len(batch)
    expect = {"g1.0": ("pass", "", 1.0), "g1.1": ("fail", "model.wrong_answer", None),
              "g1.2": ("fail", "model.syntax_error", -0.5), "g2.0": ("pass", "", 1.0),
              "g1.3": ("hack", "hack.early_exit", -1.0), "e1.0": ("pass", "", 1.0)}
    for aid, (outcome, cause, reward) in expect.items():
        subject, v = got[aid]
        assert (v.outcome, v.cause) == (outcome, cause), v.evidence
        assert reward is None or v.reward == reward
        assert subject == subjects.verdict_subject("eval" if aid == "e1.0" else "train")
        assert v.trainable == (aid != "e1.0")
        assert v.attempt.policy_version == 3 and v.attempt.task.task_id in (add.task_id, PROFILE.task_id)
        assert [layer.name for layer in v.layers] == ["structure", "visible", "hidden", "robustness"]
        assert abs(sum(v.components.values()) - v.reward) < 1e-5
    requested = {e["request_id"] for e in logs if e["event"] == "judge.requested"}
    assert requested == {"g1.0/t1/r0", "g1.1/t1/r0", "g1.3/t1/r0", "e1.0/t1/r0"}
    for aid in ("g1.0", "g1.1", "g1.3", "e1.0"):  # executed: the trial record holds the run
        turn = got[aid][1].attempt.turns[-1]
        assert turn.execution is not None and turn.executor.startswith("test")
        assert len(turn.execution.stdout) <= judge_actor.RECORDED_OUTPUT_CHARS
    for aid in ("g1.2", "g2.0"):  # judged without running anything
        assert got[aid][1].attempt.turns[-1].execution is None
    hacks = [e for e in logs if e["event"] == "judge.hack_suspected"]
    assert [h["attempt_id"] for h in hacks] == ["g1.3"] and "exit" in hacks[0]["evidence"]
    assert bus.stats.gauges["judge.verdicts"] == len(batch)


async def test_only_one_verdict_is_stored_per_attempt(bus, backend):
    """An attempt delivered twice (a redelivery under another id) still has one stored verdict."""
    add = humaneval()["HumanEval/53"]
    a = attempt(add, "    return x + y\n", attempt_id="d1.0")
    async with actors(bus, config()):
        await publish(bus, a)
        await verdicts(bus, 1)
        await publish(bus, a, msg_id="d1.0-again")
        await all_handled(bus)
    assert [v.verdict_id for v in await stored_verdicts(bus)] == ["d1.0"]


async def test_sandbox_failures_are_retried_elsewhere_then_dropped_and_counted(bus, backend, tmp_path):
    """A sandbox that cannot run the job: re-run with the executor avoided, then dropped, no reward."""
    broken = SandboxConfig(backend="local", envs_dir=str(tmp_path / "no-envs"), warm_python=False)
    add = humaneval()["HumanEval/53"]
    async with actors(bus, config(broken, max_retries=2)) as logs:
        await publish(bus, attempt(add, "    return x + y\n", attempt_id="f1.0"))
        [(_, v)] = await verdicts(bus, 1)
    assert (v.outcome, v.reward, v.trainable, v.cause, v.retries) == ("dropped", None, False, "infra.sandbox", 2)
    assert "not built" in v.evidence
    retried = [e for e in logs if e["event"] == "judge.retried"]
    assert [e["retry"] for e in retried] == [1, 2] and all(e["executor"] == "test-1" for e in retried)
    assert bus.stats.gauges["judge.dropped.infra.sandbox"] == 1 and bus.stats.gauges["judge.retried"] == 2


async def test_a_failed_turn_comes_back_with_feedback_then_the_next_turn_is_judged(bus, backend):
    """With turns left, a failure goes back to the generator with feedback that hides hidden tests."""
    add = humaneval()["HumanEval/53"]
    first = attempt(add, "    return x\n", attempt_id="m1.0")
    async with actors(bus, config(max_turns=2)):
        await publish(bus, first)
        follow = await take_one(bus, subjects.CONSUMER_TURNS, Attempt)
        feedback = follow.turns[-1].feedback
        assert "Visible test failed: assert candidate(2, 3) == 5" in feedback
        assert "hidden tests failed" in feedback and "candidate(0, 1)" not in feedback
        second = msgspec.structs.replace(follow, turns=[*follow.turns, attempt(add, "    return x + y\n").turns[0]])
        await bus.publish(subjects.ATTEMPTS, second, msg_id="m1.0/t2")
        [(_, v)] = await verdicts(bus, 1)
    assert (v.verdict_id, v.outcome, v.reward, len(v.attempt.turns)) == ("m1.0", "pass", 0.95, 2)


async def test_bad_input_is_reported_and_the_judge_keeps_serving(bus, backend):
    """Garbage is dead-lettered, a task with broken verifier data is dropped with its reason."""
    bad_task = msgspec.structs.replace(io_task([], [], "def f(): pass\n"),
                                       verifier=Verifier(kind="python_io", visible="not json"))
    add = humaneval()["HumanEval/53"]
    async with actors(bus, config()):
        await bus.js.publish(subjects.ATTEMPTS, b"\x93garbage", headers={"Nats-Msg-Id": "junk"})
        await publish(bus, attempt(bad_task, "def f(): pass\n", attempt_id="b1.0"),
                      attempt(add, "    return x + y\n", attempt_id="b2.0"))
        got = {v.verdict_id: v for _, v in await verdicts(bus, 2)}
    assert (got["b1.0"].outcome, got["b1.0"].cause) == ("dropped", "infra.bad_task")
    assert "verifier.visible: not JSON" in got["b1.0"].evidence
    assert got["b2.0"].outcome == "pass"
    letters = [d async for _, d, _ in bus.replay(subjects.STREAM_DLQ, f"{subjects.DEAD_LETTERS}.>", DeadLetter, follow=False)]
    assert [d.reason for d in letters] == ["malformed"]


async def test_a_task_of_an_unknown_kind_is_dropped_as_a_bad_task_and_the_judge_keeps_serving(bus, backend):
    """An unknown verifier kind is `infra.bad_task` (no reward, not trainable, never run or
    re-run), even for code that does not compile; the next attempt is judged as usual."""
    task = io_task([([[1]], 1)], [([[2]], 2)], "def f(xs):\n    return sum(xs)\n")
    unknown = msgspec.structs.replace(task, verifier=msgspec.structs.replace(task.verifier, kind="pyhton_io"))
    add = humaneval()["HumanEval/53"]
    async with actors(bus, config(max_retries=2)) as logs:
        await publish(bus, attempt(unknown, "def f(xs) return", attempt_id="k1.0"),
                      attempt(unknown, "def f(xs):\n    return sum(xs)\n", attempt_id="k1.1"),
                      attempt(add, "    return x + y\n", attempt_id="k2.0"))
        got = {v.verdict_id: v for _, v in await verdicts(bus, 3)}
    for aid in ("k1.0", "k1.1"):
        v = got[aid]
        assert (v.outcome, v.cause, v.reward, v.trainable, v.retries) == ("dropped", "infra.bad_task", None, False, 0)
        assert "verifier.kind: 'pyhton_io' is not a known kind (did you mean 'python_io'?)" in v.evidence
    assert got["k2.0"].outcome == "pass"
    assert {e["request_id"] for e in logs if e["event"] == "judge.requested"} == {"k2.0/t1/r0"}
    assert bus.stats.gauges["judge.dropped.infra.bad_task"] == 2
