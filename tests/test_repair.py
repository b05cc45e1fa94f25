"""Failures reused: a tool episode the model failed becomes a repair task that starts from its
last workspace; infrastructure drops, hacks and held-out tasks give none; the sampler admits
repair tasks through the real bus."""

from __future__ import annotations

import hashlib
import time
from functools import partial
from pathlib import Path

import anyio
import msgspec
import pytest

from bus import subjects
from bus.consumer import consume
from bus.messages import (
    Attempt,
    LayerResult,
    StepCredit,
    Task,
    TaskAssignment,
    ToolCall,
    Turn,
    Verdict,
    WeightVersion,
)
from envs.config import EnvEntry, EnvsConfig, SamplerConfig
from envs.repair import REPAIR_OF, repair_refusal, repair_task
from judging import repo
from judging.episode import judge_episode, run_episode, scripted, tool_text
from judging.tools import result_message
from runtime.config import RunConfig, TrainingConfig
from sandbox.session import open_session
from tests.support.sandbox_fixtures import built_envs  # noqa: F401
from tests.test_repository import _tasks, local  # noqa: F401
from tests.test_sampler_bus import Generator, _run_sampler, idle, settles_at  # noqa: F401


def _verdict_of(task: Task, log, outcome, attempt_id: str = "g.0") -> Verdict:
    """The verdict the judge would send for an in-process episode (`judging.episode`)."""
    turns = [Turn(prompt_ids=b"", completion_ids=b"", logprobs=b"", completion=m["content"],
                  policy_version=0, feedback=result_message(r))
             for m, r in zip([m for m in log.messages if m["role"] == "assistant"], log.results)]
    steps = [StepCredit(turn=i, state="", passing=r.passing, next_state=r.digest)
             for i, r in enumerate(log.results)]
    hidden = outcome.per_layer.get("hidden", (0, 0))
    attempt = Attempt(attempt_id=attempt_id, group_id=attempt_id.split(".")[0], index=0,
                      group_size=1, task=task, turns=turns, policy_version=0,
                      workspace=log.files, refused=log.refused, tool_calls=log.calls, steps=steps)
    return Verdict(verdict_id=attempt_id, attempt=attempt, outcome=outcome.outcome,
                   reward=outcome.reward, cause=outcome.cause, evidence=outcome.evidence,
                   layers=[LayerResult(name="hidden", passed=hidden[0], total=hidden[1])])


def _raw(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.bus
async def test_a_model_failure_becomes_a_repair_task_starting_from_its_last_workspace(local):  # noqa: F811
    """An agent edits the wrong module, runs the tests and submits: the judged failure gives a
    repair task whose workspace is byte for byte the one the attempt left, whose prompt
    quotes its last test run and hidden failures by count only, and which a fix solves."""
    backend, cache = local
    task = _tasks(1)[0]
    touched = task.verifier.extra["touched"].split(",")[0]
    wrong = [tool_text("replace", path=touched, old="\n", new="\n# looked here\n"),
             tool_text("run_tests"), tool_text("submit")]
    log = await run_episode(scripted(wrong), task, await open_session(cache, backend, task))
    outcome = await judge_episode(task, log, backend)
    assert outcome.outcome == "fail" and outcome.cause.startswith("model."), outcome
    verdict = _verdict_of(task, log, outcome)

    repair = repair_task(verdict)
    assert repair is not None and repair.split == "train" and repair.domain == task.domain
    assert repair.verifier.extra[REPAIR_OF] == task.task_id
    assert repair.verifier.hidden == task.verifier.hidden and repair.files == log.files
    assert "# looked here" in repair.files[touched] and repair.files != task.files
    assert "FAILED" in repair.prompt and outcome.cause in repair.prompt
    note = repair.prompt[len(task.prompt):]
    assert outcome.evidence and outcome.evidence not in note  # what hidden tests said stays out
    hidden = outcome.per_layer["hidden"]
    assert f"{hidden[1] - hidden[0]} of {hidden[1]} hidden tests failed" in note
    assert repair_task(verdict).task_id == repair.task_id  # one failed workspace, one task

    session = await open_session(cache, backend, repair)
    assert _raw(session.workspace.root) == {p: hashlib.sha256(t.encode()).hexdigest()
                                            for p, t in log.files.items()}
    assert session.workspace.prepared["visible_passed"] == log.results[1].passing
    fix = [tool_text("write_file", path=p, content=repo.files_of(task.verifier.reference)[p])
           for p in repair.files if p in repo.files_of(task.verifier.reference)
           and not repo.is_test_path(p)]
    fixed = await run_episode(scripted(fix), repair, session)
    assert (await judge_episode(repair, fixed, backend)).outcome == "pass"


def _failed(task: Task, note: str = "tried something", **changes) -> Verdict:
    files = {**task.files, "notes.txt": note}
    attempt = Attempt(attempt_id="g.1", group_id="g", index=1, group_size=2, task=task,
                      turns=[], policy_version=0, workspace=files,
                      tool_calls=[ToolCall(name="write_file"), ToolCall(name="submit")])
    verdict = Verdict(verdict_id="g.1", attempt=attempt, outcome="fail", reward=0.7,
                      cause="model.wrong_answer")
    return msgspec.structs.replace(verdict, **changes)


@pytest.mark.unit
def test_infra_drops_hacks_held_out_tasks_and_no_change_give_no_repair_task():
    """Only a train attempt at a train tool task, failed for the model's sake with a changed
    workspace, and not itself a repair, gives a repair task."""
    task = _tasks(1)[0]
    assert repair_task(_failed(task)) is not None
    attempt = _failed(task).attempt
    refused = {
        "dropped": _failed(task, outcome="dropped", reward=None, cause="infra.session_lost"),
        "infra cause": _failed(task, cause="infra.sandbox"),
        "hack": _failed(task, outcome="hack", reward=-1.0, cause="hack.tamper"),
        "passed": _failed(task, outcome="pass", reward=1.0, cause=""),
        "held out": _failed(task, attempt=msgspec.structs.replace(
            attempt, task=msgspec.structs.replace(task, split="heldout"))),
        "validation": _failed(task, attempt=msgspec.structs.replace(
            attempt, task=msgspec.structs.replace(task, split="validation"))),
        "eval attempt": _failed(task, attempt=msgspec.structs.replace(attempt, purpose="eval")),
        "unchanged": _failed(task, attempt=msgspec.structs.replace(attempt, workspace=dict(task.files))),
        "a repair": _failed(repair_task(_failed(task)) or task),
    }
    for name, verdict in refused.items():
        assert repair_task(verdict) is None and repair_refusal(verdict), name


@pytest.mark.bus
async def test_the_sampler_admits_repair_tasks_through_the_bus(bus, nats_server, idle):  # noqa: F811
    """Failed, hacked, dropped and held-out repository verdicts reach a real sampler: only the
    model's failure becomes a task, and after the learner's next step it is admitted, as
    training work starting from the failed workspace."""
    config = RunConfig(
        envs=EnvsConfig(use={"structured_output": EnvEntry(count=12, heldout_share=0.0)},
                        mix={"structured": 0.01, "repository": 1.0}),
        training=TrainingConfig(mode="async", batch_size=4, group_size=2, max_staleness=0),
        sampler=SamplerConfig(min_pool=4, repair_tasks=True))
    first, second, third = _tasks(3)
    sent = [_failed(first),
            msgspec.structs.replace(_failed(second), verdict_id="h.1", outcome="hack",
                                    reward=-1.0, cause="hack.tamper"),
            msgspec.structs.replace(_failed(third), verdict_id="d.1", outcome="dropped",
                                    reward=None, cause="infra.session_lost", trainable=False),
            msgspec.structs.replace(_failed(msgspec.structs.replace(first, split="heldout"),
                                            note="held out"), verdict_id="x.1")]
    gen = Generator()
    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, subjects.CONSUMER_TASKS, TaskAssignment, gen.handle))
        sampler = await _run_sampler(tg, nats_server.url, config)
        await settles_at(bus, gen, idle, 2, group=2)  # capacity (0 + 0 + 1) * 4: two groups
        for v in sent:
            await bus.publish(subjects.verdict_subject("train"), v, msg_id=v.verdict_id)
        await idle.reached(judged=4, admitted=4, version=0, step=0)
        await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                         WeightVersion(version=1, object_name="", step=1, created_at=time.time()))
        await gen.wait_for(4)
        await sampler.stop()
        bus.stopping.set()
    later = [a.task for a in gen.got[2:]]
    repairs = [t for t in later if t.domain == "repository"]
    assert repairs and {t.task_id for t in repairs} == {repair_task(sent[0]).task_id}
    assert all(t.files == sent[0].attempt.workspace and t.split == "train" for t in repairs)
    assert all(a.purpose == "train" for a in gen.got)
    assert sampler.bus.stats.gauges["repair_tasks"] == 1.0
    await sampler.bus.close()


@pytest.mark.unit
@pytest.mark.parametrize("path", ["configs/repository.toml"])
def test_repository_config_reuses_failures_and_the_default_does_not(path):
    """Repair tasks are on for the repository example only; step credit is off everywhere."""
    from runtime.config import load

    assert load(path).sampler.repair_tasks and not load("configs/default.toml").sampler.repair_tasks
    assert load(path).learner.credit == "trajectory"
