"""The sampler and evaluator as real actor processes under `whet up`."""

from __future__ import annotations

import json
import time

from bus import subjects

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
    deadline = time.monotonic() + 60
    while True:
        result = stack.whet("status", "--json")
        assert result.returncode == 0, result.stderr
        snap = json.loads(result.stdout)
        streams = {s["stream"]: s for s in snap["streams"]}
        tasks = streams.get(subjects.STREAM_TASKS, {}).get("messages", 0)
        ready = {a["kind"] for a in snap["actors"] if a["state"] == "ready"}
        # sync mode, version 0: (0 + 0 + 1) * 4 attempts = 2 groups; plus 3 eval tasks
        if ready == {"sampler", "evaluator"} and tasks == 5:
            break
        assert time.monotonic() < deadline, (ready, streams)
        time.sleep(0.5)
    time.sleep(2)
    snap = json.loads(stack.whet("status", "--json").stdout)
    assert {s["stream"]: s for s in snap["streams"]}[subjects.STREAM_TASKS]["messages"] == 5
    stack.stop()
