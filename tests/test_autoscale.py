"""Autoscaling: the policy called directly, then a real stack whose probe actors scale up under
a backlog and back down once idle, with nothing lost."""

from __future__ import annotations

import json
import math
import re

import anyio
import pytest

from bus import subjects
from bus.errors import ConfigError
from runtime import config as config_mod
from runtime.cli import stack_status as status_mod
from runtime.stack.autoscale import KindPolicy, KindState, backlog_of, step, wanted
from tests.test_runtime import PROBE, all_done, publish_requests, ready_probes, wait_for

POLICY = KindPolicy(min=1, max=4, backlog_per_instance=10, up_cooldown_s=5, down_cooldown_s=30)


@pytest.mark.unit
def test_wanted_count_follows_backlog_within_bounds():
    assert [wanted(POLICY, b) for b in (0, 1, 10, 11, 35, 1000)] == [1, 1, 1, 2, 4, 4]


@pytest.mark.unit
def test_scales_up_at_once_but_not_within_the_up_cooldown():
    state = step(POLICY, KindState(1), backlog=35, now=100.0)
    assert state.count == 4 and state.changed_at == 100.0
    held = step(POLICY, KindState(2, changed_at=98.0), backlog=35, now=100.0)
    assert held.count == 2, "a change 2 s ago blocks the next for the 5 s cooldown"
    assert step(POLICY, KindState(2, changed_at=94.0), backlog=35, now=100.0).count == 4


@pytest.mark.unit
def test_scales_down_one_at_a_time_after_a_quiet_cooldown():
    """Fewer instances are needed from t=100: nothing happens until 30 s later, then one goes;
    the next waits another 30 s."""
    state = KindState(3, changed_at=0.0, needed_at=100.0)
    for now in (101.0, 120.0, 129.0):
        state = step(POLICY, state, backlog=0, now=now)
        assert state.count == 3
    state = step(POLICY, state, backlog=0, now=130.0)
    assert state.count == 2 and state.changed_at == 130.0
    assert step(POLICY, state, backlog=0, now=150.0).count == 2
    assert step(POLICY, state, backlog=0, now=160.0).count == 1
    busy_again = step(POLICY, KindState(3, changed_at=0.0, needed_at=100.0), backlog=25, now=131.0)
    assert busy_again.count == 3 and busy_again.needed_at == 131.0


@pytest.mark.unit
def test_counts_outside_the_bounds_are_brought_back_at_once():
    assert step(POLICY, KindState(0, changed_at=99.0), backlog=0, now=100.0).count == 1
    assert step(POLICY, KindState(9, changed_at=99.0), backlog=0, now=100.0).count == 4


@pytest.mark.unit
def test_backlog_adds_undelivered_and_unacked_and_counts_a_missing_consumer_whole():
    states = {"WHET_EXEC": {"executor": {"pending": 7, "in_flight": 3, "redelivered": 1},
                           "": {"stored": 10}},
              "WHET_TASKS": {"": {"stored": 4}}}
    assert backlog_of(["WHET_EXEC/executor"], states) == 10
    assert backlog_of(["WHET_EXEC/executor", "WHET_TASKS/generator"], states) == 14
    assert backlog_of(["WHET_GONE/x"], states) == 0
    assert math.isinf(KindState(1).changed_at)


@pytest.mark.unit
def test_bad_autoscale_config_is_named(tmp_path):
    """min above max, a kind without a queue and an unknown kind are config errors."""
    cases = {'[autoscale.kinds.executor]\nmin = 5\nmax = 2\n': "min (5) is above max (2)",
             '[actors.target]\nprobe = "tests.support.probe_actor:run"\n[autoscale.kinds.probe]\n':
                 "no default queue",
             '[autoscale.kinds.nosuch]\nconsumers = ["WHET_EXEC/executor"]\n': "autoscale.kinds.nosuch"}
    for text, expected in cases.items():
        path = tmp_path / "c.toml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=re.escape(expected)):
            config_mod.load(path)


AUTOSCALED = PROBE.format(n=1) + """
[autoscale]
interval_s = 0.5
[autoscale.kinds.probe]
min = 1
max = 3
backlog_per_instance = 4
up_cooldown_s = 1
down_cooldown_s = 3
consumers = ["WHET_EXEC/executor"]
"""


@pytest.mark.stack
async def test_probes_scale_up_under_a_backlog_and_down_when_idle(bus, make_stack):
    """A backlog of 60 jobs brings the probe count to its max of 3 and the new instances take
    work; once the queue is empty the count goes back to 1; every job is done exactly once."""
    stack = make_stack(AUTOSCALED)
    stack.start()
    await ready_probes(bus, 1)
    await publish_requests(bus, 60, sleep_s=0.3)
    await ready_probes(bus, 3, timeout_s=20)
    done = await all_done(bus, 60, timeout_s=60)
    assert sorted(d.request.request_id for d in done) == sorted(f"r{i}" for i in range(60))
    assert {"probe-2", "probe-3"} <= {d.executor for d in done}, "new instances took work"

    def scaled_steps() -> list[tuple[int, int]]:
        tail = stack.whet("tail", "--no-follow", "--json", "--event", "autoscale.scaled")
        return [(e["fields"]["before"], e["fields"]["after"])
                for e in map(json.loads, tail.stdout.splitlines())]

    async def back_to_one():
        """Events reach the stream after the scale they report (the supervisor forwards its
        log asynchronously), so both the count and the event log are waited on."""
        snap = await status_mod.gather(bus)
        if snap.live("probe") != 1 or any(a.kind == "probe" and a.state in ("stopping", "dead")
                                          for a in snap.actors):
            return None
        steps = await anyio.to_thread.run_sync(scaled_steps)
        return steps if steps and steps[-1] == (2, 1) else None

    steps = await wait_for(back_to_one, 40, "scaled back down to one probe, and logged")
    (state,) = await bus.stream_states([subjects.STREAM_EXEC_DONE])
    assert state.messages == 60
    assert steps[0] == (1, 3), steps
