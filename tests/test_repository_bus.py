"""Tool episodes over a real nats-server: the judge runs each turn's tool call in a session held
by a real executor (local sandboxes), and a killed executor mid-episode gives no reward."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from actors import executor as executor_actor
from actors import judge as judge_actor
from bus import subjects
from bus.codec import decode, pack_ids
from bus.messages import Attempt, Heartbeat, Task, Turn, Verdict
from envs.environment import generate
from envs.repository import ENVIRONMENT
from judging import repo
from judging.config import JudgeConfig
from judging.episode import tool_text
from runtime.config import RunConfig, SupervisorConfig
from sandbox.config import ExecutorConfig, SandboxConfig
from sandbox.workspace import digest_of
from tests.conftest import until
from tests.support.sandbox_fixtures import built_envs  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


def _config() -> RunConfig:
    return RunConfig(judge=JudgeConfig(session_timeout_s=5.0), supervisor=SupervisorConfig(drain_s=3),
                     executor=ExecutorConfig(sandbox=SandboxConfig(backend="local"), concurrency=2))


def _task() -> Task:
    return list(generate(ENVIRONMENT, 1, seed=5))[0]


def _turn(completion: str) -> Turn:
    return Turn(prompt_ids=pack_ids([1, 2]), completion_ids=pack_ids(list(range(len(completion) // 4 + 1))),
                logprobs=b"", completion=completion, policy_version=0)


class ScriptedGenerator:
    """Plays the generator's part with fixed completions: first turn on ATTEMPTS, then one turn
    per continuation read from TURNS (its last turn carries the tool's result)."""

    def __init__(self, bus, task: Task, script: list[str], attempt_id: str = "g1.0") -> None:
        self.bus, self.task, self.script, self.attempt_id = bus, task, list(script), attempt_id
        self.feedback: list[str] = []

    async def start(self) -> None:
        first = Attempt(attempt_id=self.attempt_id, group_id=self.attempt_id.split(".")[0], index=0,
                        group_size=1, task=self.task, turns=[_turn(self.script.pop(0))], policy_version=0)
        await self.bus.publish(subjects.ATTEMPTS, first, msg_id=f"{self.attempt_id}/t0")

    async def continuation(self, timeout_s: float = 60) -> Attempt:
        spec = subjects.CONSUMER_TURNS
        await self.bus.ensure_consumer(spec)
        sub = await self.bus.js.pull_subscribe_bind(durable=spec.durable, stream=spec.stream)
        with anyio.fail_after(timeout_s):
            while True:
                try:
                    [msg] = await sub.fetch(1, timeout=1.0)
                except TimeoutError:
                    continue
                await msg.ack()
                return decode(msg.data, Attempt)

    async def step(self, attempt: Attempt, twice: bool = False) -> None:
        """Sample the next scripted turn; `twice` publishes it again as a redelivery would."""
        self.feedback.append(attempt.turns[-1].feedback)
        follow = Attempt(**{**{f: getattr(attempt, f) for f in attempt.__struct_fields__},
                            "turns": [*attempt.turns, _turn(self.script.pop(0))]})
        msg_id = f"{self.attempt_id}/t{len(follow.turns) - 1}"
        for copy in range(2 if twice else 1):
            await self.bus.publish(subjects.ATTEMPTS, follow, msg_id=msg_id + "-again" * copy)


async def _verdict(bus, timeout_s: float = 60) -> Verdict:
    with anyio.fail_after(timeout_s):
        async for _, verdict, _ in bus.replay(subjects.STREAM_VERDICTS, f"{subjects.VERDICTS}.>", Verdict):
            return verdict


def _fix_script(task: Task) -> list[str]:
    ref = repo.files_of(task.verifier.reference)
    touched = task.verifier.extra["touched"].split(",")
    return ([tool_text("run_tests"), tool_text("read_file", path=touched[0])]
            + [tool_text("write_file", path=p, content=ref[p]) for p in touched]
            + [tool_text("run_tests"), tool_text("submit")])


@pytest.mark.bus
async def test_scripted_episode_through_judge_and_executor_gets_full_reward(bus, built_envs):  # noqa: F811
    """Each turn's tool call runs in the executor's session; submit judges the workspace: reward 1.
    A malformed turn costs a step; a step handled twice (redelivered) edits the workspace once."""
    task = _task()
    init = next(p for p in task.files if p.endswith("__init__.py") and not p.startswith("tests"))
    fix = _fix_script(task)
    script = [fix[0], "let me look at the code", tool_text("replace", path=init, old='"""', new='"""#'),
              *fix[1:]]
    agent = ScriptedGenerator(bus, task, script)
    async with anyio.create_task_group() as tg:
        await tg.start(judge_actor.run, bus, _config())
        await tg.start(executor_actor.run, bus, _config())
        await agent.start()
        for i in range(len(script) - 1):
            await agent.step(await agent.continuation(), twice=i == 1)
        verdict = await _verdict(bus)
        bus.stopping.set()
    assert verdict.outcome == "pass" and verdict.reward == pytest.approx(1.0), verdict.evidence
    assert [c.name for c in verdict.attempt.tool_calls] == [
        "run_tests", "", "replace", "read_file", *["write_file"] * (len(fix) - 4), "run_tests", "submit"]
    assert "No tool call" in agent.feedback[1]
    assert verdict.attempt.workspace[init].count("#") == 1  # the repeated step ran once
    assert verdict.attempt.session == bus.identity.instance
    assert "FAILED" in agent.feedback[0] and agent.feedback[-1].rstrip().endswith("OK")
    assert verdict.attempt.workspace[task.verifier.extra["touched"].split(",")[0]] \
        == repo.files_of(task.verifier.reference)[task.verifier.extra["touched"].split(",")[0]]
    # Per-step credit: one record per turn, chained by workspace hash, from the task's files;
    # only the fixing write moves the visible count (the docstring edit and reads do not).
    steps = verdict.attempt.steps
    assert [s.turn for s in steps] == list(range(len(verdict.attempt.turns)))
    assert steps[0].state == digest_of(dict(task.files))
    assert all(b.state == a.next_state for a, b in zip(steps, steps[1:]))
    assert steps[2].next_state != steps[2].state and steps[2].reward == 0.0  # the replace
    first = steps[0].passing
    assert first < 4 and steps[-1].passing == 4 == steps[-1].total
    assert [s.reward for s in steps if s.reward] == [(4 - first) / 4]
    assert all(s.end - s.start == len(t.completion_ids) // 4
               for s, t in zip(steps, verdict.attempt.turns))


def _executor_process(tmp_path: Path, url: str) -> subprocess.Popen:
    config = tmp_path / "executor.toml"
    config.write_text('[executor]\nconcurrency = 2\n[executor.sandbox]\nbackend = "local"\n')
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return subprocess.Popen(
        [sys.executable, "-m", "runtime.stack.actor", "--kind", "executor", "--instance", "exec-1",
         "--config", str(config), "--url", url, "--run-dir", str(run_dir)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        stdout=open(run_dir / "executor.out", "ab"), stderr=subprocess.STDOUT)


async def _ready(bus, instance: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    key = subjects.actor_key("executor", instance)

    async def ready() -> bool:
        beat = await bus.kv_get(subjects.BUCKET_ACTORS, key, Heartbeat)
        if beat is not None and beat.state == "ready":
            return True
        assert proc.poll() is None, "the executor process died while starting"
        return False

    await until(ready, timeout_s, f"{instance}'s heartbeat saying ready")


@pytest.mark.bus
async def test_killed_executor_mid_episode_gives_no_reward(bus, nats_server, tmp_path, built_envs):  # noqa: F811
    """The executor holding the workspace is killed between two tool calls: the attempt is
    dropped as infra.session_lost, with no reward and not trainable."""
    task = _task()
    proc = _executor_process(tmp_path, nats_server.url)
    try:
        await _ready(bus, "exec-1", proc)
        agent = ScriptedGenerator(bus, task, _fix_script(task))
        async with anyio.create_task_group() as tg:
            await tg.start(judge_actor.run, bus, _config())
            await agent.start()
            opened = await agent.continuation()          # step 1 ran in exec-1's session
            assert opened.session == "exec-1" and "FAILED" in opened.turns[-1].feedback
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            await agent.step(opened)                     # step 2 finds no session
            verdict = await _verdict(bus)
            bus.stopping.set()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert verdict.outcome == "dropped" and verdict.reward is None and not verdict.trainable
    assert verdict.cause == "infra.session_lost"


STACK = """
[actors.count]
sampler = 1
generator = 1
judge = 1
executor = 1

[training]
batch_size = 4
group_size = 2
max_staleness = 0
mode = "sync"

[model]
max_context = 4096

[sampler]
min_pool = 2

[generator]
engine = "fake"
[generator.sampling]
max_new_tokens = 16

[executor.sandbox]
backend = "local"

[envs]
mix = { structured = 0.0, data = 0.0, repository = 1.0 }
[envs.use.repository]
count = 2
heldout_share = 0.0
levels = [0]
[envs.use.structured_output]
enabled = false
[envs.use.data_scripts]
enabled = false
[envs.use.humaneval]
enabled = false
"""


@pytest.mark.stack
async def test_repository_episodes_run_through_the_whole_stack(make_stack, bus, built_envs):  # noqa: F811
    """Sampler, generator (fake engine), judge and executor under `whet up`: each attempt is a
    multi-turn tool episode in an executor's session, ended by the step budget, judged, and
    the group's second attempt restores the first one's prepared workspace."""
    stack = make_stack(STACK)
    await anyio.to_thread.run_sync(stack.start)
    try:
        with anyio.fail_after(180):
            verdicts: dict[str, Verdict] = {}
            async for _, verdict, _ in bus.replay(subjects.STREAM_VERDICTS, f"{subjects.VERDICTS}.>", Verdict):
                verdicts[verdict.verdict_id] = verdict
                if len(verdicts) == 4:
                    break
            stats = await _executor_gauges(bus, "executor.sessions.opened", 4)
    finally:
        await anyio.to_thread.run_sync(stack.stop)
    for v in verdicts.values():
        a = v.attempt
        assert a.task.domain == "repository" and a.session.startswith("executor")
        assert v.outcome == "fail" and v.reward is not None, (v.cause, v.evidence)
        steps = int(a.task.verifier.extra["max_steps"])
        assert len(a.turns) == len(a.tool_calls) <= steps and a.workspace == dict(a.task.files)
        assert all(t.feedback for t in a.turns[:-1])
        start = digest_of(dict(a.task.files))  # step credit rode along: nothing changed
        assert len(a.steps) == len(a.turns) and {(s.state, s.reward) for s in a.steps} == {(start, 0.0)}
    assert stats["executor.sessions.opened"] == 4 and stats["executor.workspace.restores"] >= 1


async def _executor_gauges(bus, key: str, at_least: float) -> dict[str, float]:
    """The executor's gauges once a heartbeat shows `key` at `at_least` (beats come every 2 s:
    the last session may be newer than the last beat)."""
    stats: dict[str, float] = {}

    async def shown() -> bool:
        nonlocal stats
        beats = await bus.kv_items(subjects.BUCKET_ACTORS, Heartbeat)
        stats = next((b.stats for b in beats.values() if b.kind == "executor"), {})
        return stats.get(key, 0) >= at_least

    await until(shown, 180, f"an executor heartbeat with {key} at {at_least}")
    return stats
