"""The wire format: every message round-trips, reads with the reference msgpack library,
and bad payloads fail with a reason that names what was wrong."""

from __future__ import annotations

import msgpack
import msgspec
import numpy as np
import pytest

from bus import messages as m
from bus.codec import decode, encode, pack_f32, pack_ids, unpack_f32, unpack_ids
from bus.errors import MalformedMessage, SchemaMismatch

pytestmark = pytest.mark.unit


def _task() -> m.Task:
    return m.Task(task_id="py/1", env="py", env_version="1", domain="python", prompt="add",
                  verifier=m.Verifier(kind="python_io", visible='[{"args":[1],"expected":2}]'),
                  entry_point="f", files={"a.txt": "x"})


def _attempt() -> m.Attempt:
    turn = m.Turn(prompt_ids=pack_ids([1, 2, 3]), completion_ids=pack_ids([4, 5]),
                  logprobs=pack_f32([-0.5, -1.25]), completion="def f(x): return x+1",
                  policy_version=3, generator="generator-1")
    return m.Attempt(attempt_id="a.0", group_id="a", index=0, group_size=4, task=_task(),
                     turns=[turn], policy_version=3)


def _executed_attempt() -> m.Attempt:
    """An attempt whose turn records the execution result and the executor that ran it."""
    attempt = _attempt()
    turn = msgspec.structs.replace(attempt.turns[0], executor="executor-2",
                                   execution=m.ExecutionResult(status="ok", exit_code=0))
    return msgspec.structs.replace(attempt, turns=[turn])


def samples() -> list[m.Message]:
    """One filled-in instance of every top-level message type."""
    req = m.ExecutionRequest(request_id="a.0/t0/r0", attempt=_attempt(),
                             job=m.Job(command=["python3", "h.py"], files={"h.py": b"pass"}))
    result = m.ExecutionResult(status="timeout", wall_s=1.5, cpu_s=0.1, report='{"x": 1}')
    out = [
        _task(),
        m.TaskAssignment(assignment_id="a", task=_task(), group_size=4, admitted_version=2),
        _attempt(),
        req,
        m.ExecutionDone(request=req, result=result, executor="executor-1"),
        m.Verdict(verdict_id="a.0", attempt=_attempt(), outcome="fail", reward=-0.5,
                  components={"tests": 0.0}, cause="model.timeout",
                  layers=[m.LayerResult(name="visible", passed=1, total=2)]),
        m.WeightVersion(version=4, object_name="v4", size=10, sha256="ab"),
        m.StepRecord(step=3, policy_version=3, trained_at=5.0, samples=8, samples_total=24,
                     left_out={"no_signal": 4}, mean_reward=0.25, staleness_max=1, loss=0.5),
        m.LearnerRendezvous(generation=2, host="10.0.0.5", port=29500, world_size=2,
                            instance="learner-1", published_at=1.0),
        m.LearnerRankClaim(rank=1, generation=2, state="joined", incarnation="ab12",
                           instance="learner_rank-1", host="h", at=1.0),
        m.Heartbeat(kind="executor", instance="executor-1", pid=1, host="h", state="ready",
                    started_at=1.0, beat_at=2.0, stats={"jobs_per_s": 3.5}, ready_at=1.5),
        m.ActorFailure(kind="target", instance="target-1", failures=3,
                       cause="ModuleNotFoundError: No module named 'no'", log="logs/target-1.out"),
        m.ScaleTarget(kind="executor", count=3),
        m.Event(ts=1.0, level="info", event="actor.started", fields={"pid": 3, "n": [1, 2]}),
        m.DeadLetter(subject="s", stream="S", stream_seq=4, consumer="c", reason="malformed",
                     error="bad", payload=b"\x00\x01"),
        m.SessionRequest(session_id="a.0", op="call", step=2,
                         call=m.ToolCall(name="read_file", arguments={"path": "a.py", "start": 1})),
        m.SessionReply(session_id="a.0", executor="executor-1", files={"a.py": "x = 1\n"},
                       refused=["../x"], digest="ab", setup_s=0.01,
                       result=m.ToolResult(name="run_tests", ok=True, output="OK",
                                           visible_passed=2, visible_total=2)),
        m.SamplerState(admitted=8, judged=4, produced=4, next_seq=2, counted=["a.0", "a.1"]),
        m.EvaluatorState(last_round=2, history=[m.EvalPoint(
            version=2, pass_rates={"python": 0.5}, attempts={"python": 4}, overall=0.5,
            train_reward=0.25, complete=False)], baseline_version=0,
            baseline={"py/1": m.TaskOutcome(domain="python", passed=1, judged=1)},
            latest_key="evaluator.round.000002.000002"),
        m.EvalRound(round=2, version=2, overall=m.HeldoutScore(rate=0.5, low=0.2, high=0.8,
                                                               tasks=4, attempts=4, paired=4,
                                                               gained=2, lost=0, p_value=0.5),
                    trained=m.HeldoutScore(rate=0.5), domains={"python": m.HeldoutScore()},
                    baseline_version=0, tasks={"py/1": m.TaskOutcome(domain="python",
                                                                      passed=1, judged=1)}),
        m.Trial(trial_id="a.0", run_id="r", current_version=5,
                verdict=m.Verdict(verdict_id="a.0", attempt=_executed_attempt(), outcome="pass",
                                  reward=1.0, judge="judge-1")),
        m.MetricsSnapshot(at=1.0, rates={"timeout_rate": 0.25}, staleness={"0": 3, "2": 1},
                          reward=m.RewardStats(count=4, mean=0.5),
                          pass_rates=[m.PassRate(purpose="train", domain="python",
                                                 difficulty="0", passed=1, judged=2, rate=0.5)],
                          queues=[m.QueueDepth(stream="S", consumer="c", pending=3)],
                          heldout_pass_rate=0.4, alerts=["timeout_rate"]),
    ]
    assert {type(x) for x in out} == set(m.TOP_LEVEL), "a message type has no sample"
    return out


@pytest.mark.parametrize("msg", samples(), ids=lambda x: type(x).__name__)
def test_every_message_round_trips(msg):
    """Encoding then decoding gives an equal message."""
    assert decode(encode(msg), type(msg)) == msg


@pytest.mark.parametrize("msg", samples(), ids=lambda x: type(x).__name__)
def test_reference_msgpack_reads_every_message(msg):
    """The reference msgpack library decodes each message to a map with its versioned tag."""
    raw = msgpack.unpackb(encode(msg), raw=False)
    assert raw["t"] == m.tag_of(type(msg))
    assert raw["t"].rsplit(".", 1)[1] == "v1"
    for name in msg.__struct_fields__:
        assert name in raw


def test_token_arrays_travel_packed_not_as_lists():
    """Token ids and logprobs are raw little-endian bytes on the wire."""
    attempt = _attempt()
    raw = msgpack.unpackb(encode(attempt), raw=False)
    turn = raw["turns"][0]
    assert isinstance(turn["completion_ids"], bytes) and isinstance(turn["logprobs"], bytes)
    assert np.frombuffer(turn["completion_ids"], "<i4").tolist() == [4, 5]
    assert unpack_ids(attempt.turns[0].prompt_ids).tolist() == [1, 2, 3]
    assert unpack_f32(attempt.turns[0].logprobs).tolist() == [-0.5, -1.25]


def test_garbage_is_malformed_and_says_so():
    """Bytes that are not MessagePack of the right shape raise MalformedMessage."""
    with pytest.raises(MalformedMessage):
        decode(b"\xc1\xc1", m.Task)
    with pytest.raises(MalformedMessage, match="whet.task.v1"):
        decode(msgpack.packb({"t": "whet.task.v1", "task_id": 5}), m.Task)


def test_wrong_version_is_a_schema_mismatch_naming_both_versions():
    """A known type at another version says which version arrived and which is read."""
    payload = msgpack.packb({"t": "whet.task.v2", "task_id": "x"})
    with pytest.raises(SchemaMismatch, match=r"got whet\.task\.v2, this build reads whet\.task\.v1"):
        decode(payload, m.Task)


def test_wrong_type_is_a_schema_mismatch():
    """A different message type on a subject is named, not silently misread."""
    with pytest.raises(SchemaMismatch, match="whet.scale.v1"):
        decode(encode(m.ScaleTarget(kind="x", count=1)), m.Task)


def test_unknown_fields_from_a_newer_writer_are_ignored():
    """Adding a field at the end keeps older readers working."""
    raw = msgspec.to_builtins(m.ScaleTarget(kind="x", count=2))
    raw["added_later"] = "value"
    assert decode(msgpack.packb(raw), m.ScaleTarget).count == 2
