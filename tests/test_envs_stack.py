"""The sampler and evaluator as real actor processes under `whet up`."""

from __future__ import annotations

import json
import time

import pytest

from bus import subjects
from tests.conftest import until, until_sync

pytestmark = pytest.mark.stack

CONFIG = """
[actors.count]
sampler = 1
evaluator = 1

[training]
batch_size = 4
group_size = 2
max_staleness = 0
mode = "sync"

[envs]
mix = { structured = 1.0 }

[envs.use.structured_output]
count = 40
heldout_share = 0.25

[evaluator]
tasks_per_domain = 3
"""


def test_sampler_and_evaluator_serve_in_a_stack(make_stack):
    """Both start from config, admit one sync batch of training work and one eval round."""
    stack = make_stack(CONFIG)
    stack.start()
    seen: list = []

    def admitted() -> bool:
        result = stack.whet("status", "--json")
        assert result.returncode == 0, result.stderr
        snap = json.loads(result.stdout)
        streams = {s["stream"]: s for s in snap["streams"]}
        tasks = streams.get(subjects.STREAM_TASKS, {}).get("messages", 0)
        rounds = streams.get(subjects.STREAM_ROUNDS, {}).get("messages", 0)
        ready = {a["kind"] for a in snap["actors"] if a["state"] == "ready"}
        seen[:] = [ready, streams]
        # sync mode, version 0: (0 + 0 + 1) * 4 attempts = 2 groups; the round's 3 eval
        # tasks on a stream of their own
        return ready == {"sampler", "evaluator"} and (tasks, rounds) == (2, 3)

    until_sync(admitted, 60, lambda: f"ready and streams: {seen}")
    time.sleep(2)  # staging: more admissions, were there any, have time to land
    streams = {s["stream"]: s for s in json.loads(stack.whet("status", "--json").stdout)["streams"]}
    assert (streams[subjects.STREAM_TASKS]["messages"],
            streams[subjects.STREAM_ROUNDS]["messages"]) == (2, 3)
    stack.stop()


PIPELINE = """
[actors.count]
sampler = 1
evaluator = 1
generator = 1
judge = 1
executor = 1

[training]
batch_size = 8
group_size = 2
max_staleness = 1

[generator]
engine = "fake"
[generator.sampling]
max_new_tokens = 16
[generator.eval_sampling]
max_new_tokens = 16

[executor.sandbox]
backend = "subprocess"

[envs]
mix = { structured = 1.0 }
[envs.use.structured_output]
count = 40
heldout_share = 0.25
[envs.use.python_functions]
count = 20
heldout_share = 0.5
gate = false

[evaluator]
tasks_per_domain = 3
"""


async def test_tasks_flow_through_the_real_pipeline(make_stack, bus):
    """Sampler -> generator (fake engine) -> judge -> executor -> verdicts back to the sampler
    and evaluator: training verdicts are only ever of training tasks, the held-out round is
    scored with python (never trained) as transfer, and the staleness bound holds."""
    import anyio

    from bus.messages import Event, SamplerState, Verdict

    stack = make_stack(PIPELINE)
    await anyio.to_thread.run_sync(stack.start)
    state, events = None, []

    async def judged_and_evaluated() -> bool:
        nonlocal state, events
        state = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
        events = [e async for _, e, _ in bus.replay(
            subjects.STREAM_EVENTS, subjects.event_filter("evaluator"), Event,
            follow=False) if e is not None and e.event == "evaluator.evaluated"]
        return state is not None and state.judged >= 16 and bool(events)

    try:
        await until(judged_and_evaluated, 90, "16 judged and an evaluator.evaluated event")
        verdicts = [v async for _, v, _ in bus.replay(
            subjects.STREAM_VERDICTS, f"{subjects.VERDICTS}.>", Verdict, follow=False)]
    finally:
        await anyio.to_thread.run_sync(stack.stop)
    train = [v for v in verdicts if v.attempt.purpose == "train"]
    evals = [v for v in verdicts if v.attempt.purpose == "eval"]
    assert train and all(v.attempt.task.split == "train" for v in train)
    assert {v.attempt.task.domain for v in train} == {"structured"}
    assert len(evals) == 6 and all(v.attempt.task.split == "heldout" for v in evals)
    fields = events[0].fields
    assert fields["complete"] is True and set(fields["transfer"]) == {"python"}
    assert state.admitted <= (0 + 1 + 1) * 8  # no weights published: version 0
