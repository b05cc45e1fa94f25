"""Tool calls by kind and the well-formed share: on the live line and in `whet status`, from
the judges' heartbeat gauges, and nowhere in a run without tool episodes."""

from __future__ import annotations

import io
import json
import time

import anyio
import pytest
from rich.console import Console

from actors import executor as executor_actor
from actors import judge as judge_actor
from bus import subjects
from bus.messages import Heartbeat
from runtime.cli import stack_status
from runtime.cli.render import render_status
from runtime.config import ActorsConfig, RunConfig, TrainingConfig
from runtime.stack import liveline
from runtime.stack.tool_tally import ToolTally, tally
from tests.support.sandbox_fixtures import built_envs  # noqa: F401
from tests.test_repository_bus import ScriptedGenerator, _config, _fix_script, _task, _verdict


def beat(kind: str, instance: str = "1", **stats: float) -> Heartbeat:
    return Heartbeat(kind=kind, instance=f"{kind}-{instance}", pid=1, host="h", state="ready",
                     started_at=90.0, beat_at=100.0, interval_s=2.0, stats=stats)


CFG = RunConfig(training=TrainingConfig(max_steps=8, batch_size=16),
                actors=ActorsConfig(count={"learner": 1, "judge": 2}))


def drawn(snap: stack_status.StackStatus) -> str:
    out = io.StringIO()
    render_status(snap, Console(file=out, width=150))
    return out.getvalue()


@pytest.mark.unit
def test_two_judges_tool_gauges_sum_into_kinds_and_a_well_formed_share():
    """Calls are summed over judges, ordered by count, malformed turns apart; other gauges
    and other kinds' gauges do not count."""
    stats = [{"judge.tool.read_file": 3, "judge.tool.malformed": 1, "judge.verdicts": 9},
             {"judge.tool.read_file": 2, "judge.tool.submit": 1, "judge.tool.run_tests": 3,
              "judge.tool.malformed": 3}]
    t = tally(stats)
    assert t == ToolTally(by_kind=(("read_file", 5), ("run_tests", 3), ("submit", 1)), malformed=4)
    assert (t.total, t.well_formed, round(t.share, 3)) == (13, 9, 0.692)
    assert t.text() == "tools 9/13 well-formed (69%): read_file 5, run_tests 3, submit 1"
    assert tally([{"judge.verdicts": 4.0}]).text() == ""


@pytest.mark.unit
def test_the_live_line_shows_tool_calls_only_when_the_run_has_tool_episodes():
    """The judges' gauges reach the end of the line and progress.csv's row; a run without
    tool episodes shows no tool part."""
    beats = [beat("learner", held_attempts=4), beat("judge", "1", **{"judge.tool.replace": 2,
             "judge.tool.malformed": 2}), beat("judge", "2", **{"judge.tool.list_files": 1}),
             beat("sampler", **{"judge.tool.replace": 50})]
    counts = liveline.counts(beats, CFG)
    assert liveline.describe(counts, CFG, 30) == (
        "30s  step 1/8: 4/16 attempts | tools 3/5 well-formed (60%): replace 2, list_files 1")
    assert (counts.row()["tool_calls"], counts.row()["tool_well_formed"]) == (5, 3)
    plain = liveline.counts([beat("learner", held_attempts=4), beat("judge", "1", **{"judge.verdicts": 3}),
                             beat("judge", "2")], CFG)
    assert liveline.describe(plain, CFG, 30) == "30s  step 1/8: 4/16 attempts"


@pytest.mark.unit
def test_whet_status_shows_tool_calls_only_when_the_run_has_tool_episodes():
    """The status tables carry the tool line and --json its fields; without tool gauges neither."""
    row = stack_status.actor_row(beat("judge", **{"judge.tool.submit": 1, "judge.tool.malformed": 1}), 101.0)
    snap = stack_status.StackStatus(actors=[row], tools=tally([row.stats]))
    assert "tools 1/2 well-formed (50%): submit 1" in drawn(snap)
    assert json.loads(json.dumps(snap.as_dict()))["tools"] == {
        "by_kind": {"submit": 1}, "malformed": 1, "total": 2, "well_formed_share": 0.5}
    assert "well-formed" not in drawn(stack_status.StackStatus(actors=[row]))


@pytest.mark.bus
async def test_a_judged_episodes_real_gauges_reach_the_live_line_and_whet_status(bus, built_envs):  # noqa: F811
    """A scripted episode with one malformed turn, through the real judge and executor: the
    heartbeat the judge's process would write, read back from KV, gives the line and status."""
    task = _task()
    fix = _fix_script(task)
    script = [fix[0], "let me look at the code", *fix[1:]]
    agent = ScriptedGenerator(bus, task, script)
    async with anyio.create_task_group() as tg:
        await tg.start(judge_actor.run, bus, _config())
        await tg.start(executor_actor.run, bus, _config())
        await agent.start()
        for _ in range(len(script) - 1):
            await agent.step(await agent.continuation())
        verdict = await _verdict(bus)
        gauges = dict(bus.stats.gauges)
        bus.stopping.set()
    names = [c.name or "malformed" for c in verdict.attempt.tool_calls]
    assert names.count("malformed") == 1 and len(names) == len(script)
    now = time.time()
    await bus.kv_put(subjects.BUCKET_ACTORS, subjects.actor_key("judge", "j-1"), Heartbeat(
        kind="judge", instance="j-1", pid=1, host="h", state="ready", started_at=now - 5,
        beat_at=now, stats=gauges))
    beats = list((await bus.kv_items(subjects.BUCKET_ACTORS, Heartbeat)).values())
    line = liveline.describe(liveline.counts(liveline.live(beats, time.time()), CFG), CFG, 5)
    kinds = ", ".join(f"{n} {names.count(n)}" for n in sorted(
        set(names) - {"malformed"}, key=lambda n: (-names.count(n), n)))
    expected = f"tools {len(names) - 1}/{len(names)} well-formed ({(len(names) - 1) / len(names):.0%}): {kinds}"
    assert line.endswith(" | " + expected), line
    assert expected in drawn(await stack_status.gather(bus))
