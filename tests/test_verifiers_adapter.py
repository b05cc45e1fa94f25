"""A verifiers 0.4.0 taskset as a whetstone environment: tasks on the host, rewards in the sandbox.

The environments are small verifiers modules written by the tests (`vf.Taskset`, a `vf.Task`
with `@vf.reward` methods), loaded through the registry as `[envs.use.<name>] verifiers = ...`
entries, and judged through the judge's own path (`judging.offline.judge_all`: build_job,
the real local sandbox, judge_result).
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap

import anyio
import pytest

from bus.errors import ConfigError
from envs.config import EnvEntry, GateConfig
from envs.environment import split_of
from envs.gates import gate_task
from envs.registry import entry_tasks
from judging.config import JudgeConfig
from sandbox import open_backend
from sandbox.config import SandboxConfig
from tests.support.judging import attempt, judge
from tests.support.sandbox_fixtures import built_envs  # noqa: F401 - fixture

ARITH = '''
"""Add two numbers; answer in <answer> tags, show the sum in <work> tags."""
import re

import verifiers.v1 as vf

ROWS = {rows}


class ArithData(vf.TaskData):
    answer: str = ""


class ArithTask(vf.Task[ArithData]):
    @vf.reward(weight=0.75)
    async def correct(self, task, trace) -> float:
        found = re.search(r"<answer>(.*?)</answer>", trace.last_reply, re.S)
        return float(found is not None and found.group(1).strip() == task.answer)

    @vf.reward(weight=0.25)
    async def shows_work(self, task, trace) -> float:
        # executes model output: the reason rewards run in the sandbox
        found = re.search(r"<work>(.*?)</work>", trace.last_reply, re.S)
        return float(found is not None and str(eval(found.group(1))) == task.answer)


class ArithTaskset(vf.Taskset[ArithTask]):
    def load(self):
        for a, b in ROWS:
            yield ArithTask(ArithData(prompt=f"What is {{a}} + {{b}}?", answer=str(a + b)))


__all__ = ["ArithTaskset"]
'''

FRAGILE = '''
import verifiers.v1 as vf


class FragileData(vf.TaskData):
    mode: str = "ok"


class FragileTask(vf.Task[FragileData]):
    @vf.reward
    async def fragile(self, task, trace) -> float:
        if task.mode == "raise":
            return 1 / 0
        return {"range": 2.0, "nan": float("nan")}.get(task.mode, float(trace.last_reply == "yes"))


class FragileTaskset(vf.Taskset[FragileTask]):
    def load(self):
        for mode in ("ok", "raise", "range", "nan"):
            yield FragileTask(FragileData(prompt=f"say yes ({mode})", mode=mode))


__all__ = ["FragileTaskset"]
'''

DUEL = '''
import verifiers.v1 as vf


class DuelTask(vf.Task[vf.TaskData]):
    @vf.reward
    async def won(self, trace) -> float:
        return 1.0


class DuelTaskset(vf.Taskset[DuelTask]):
    def load(self):
        yield DuelTask(vf.TaskData(prompt="play"))


class DuelConfig(vf.EnvConfig):
    white: vf.AgentConfig = vf.AgentConfig()
    black: vf.AgentConfig = vf.AgentConfig()


class DuelEnv(vf.Env[DuelConfig]):
    async def run(self, task, agents):
        await agents.white.run(task)


__all__ = ["DuelTaskset", "DuelEnv"]
'''

BOXED = '''
import verifiers.v1 as vf


class BoxedTask(vf.Task[vf.TaskData]):
    @vf.reward
    async def file_written(self, trace, runtime) -> float:
        return 1.0


class BoxedTaskset(vf.Taskset[BoxedTask]):
    def load(self):
        yield BoxedTask(vf.TaskData(prompt="write answer.txt"))


__all__ = ["BoxedTaskset"]
'''

ROWS = [(2, 3), (10, 7), (41, 1), (6, 6), (12, 30), (8, 9)]


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """The test's verifiers modules, importable for this module's tests."""
    folder = tmp_path_factory.mktemp("vf_envs")
    sources = {"whet_vf_arith": ARITH.format(rows=ROWS),
               "whet_vf_arith_reversed": ARITH.format(rows=ROWS[::-1]),
               "whet_vf_fragile": FRAGILE, "whet_vf_duel": DUEL, "whet_vf_boxed": BOXED}
    for name, source in sources.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))


@pytest.fixture(scope="module")
def arith(modules):
    return entry_tasks("arith", EnvEntry(verifiers="whet_vf_arith", heldout_share=0.5)).tasks


@pytest.fixture
async def local(built_envs):  # noqa: F811 - the fixture imported above
    backend = await open_backend(SandboxConfig(backend="local"), slots=2, run_id=f"vf-{os.getpid()}")
    try:
        yield backend
    finally:
        with anyio.CancelScope(shield=True):
            await backend.aclose()


@pytest.mark.unit
def test_tasks_have_content_ids_and_stable_splits(modules, arith):
    """Every row becomes a task whose id is its content: the same rows in another order keep
    their ids and splits, and the held-out share is chosen by id."""
    again = entry_tasks("arith", EnvEntry(verifiers="whet_vf_arith_reversed", heldout_share=0.5)).tasks
    assert len(arith) == len(ROWS) and len({t.task_id for t in arith}) == len(ROWS)
    assert {(t.task_id, t.split) for t in again} == {(t.task_id, t.split) for t in arith}
    assert all(t.split == split_of(t.task_id, 0.5) for t in arith)
    assert {t.split for t in arith} == {"train", "heldout"}
    first = arith[0]
    assert first.prompt == "What is 2 + 3?" and first.verifier.kind == "verifiers"
    assert first.task_id.startswith("arith/v1-L0-") and first.domain == "arith"


@pytest.mark.bus
async def test_rubric_scores_replies_in_the_sandbox(arith, local):
    """A correct reply gets the rubric's full reward, a partly right one its weighted part,
    a wrong one nothing: each reward function's score times its weight."""
    task = arith[0]  # 2 + 3
    replies = ["<work>2 + 3</work> so <answer>5</answer>", "<answer>5</answer>",
               "<work>2 * 3</work><answer>6</answer>"]
    judged = await judge(local, [attempt(task, r, attempt_id=f"g.{i}") for i, r in enumerate(replies)])
    got = [(j.judgement.outcome, j.judgement.reward, j.judgement.components) for j in judged]
    assert got == [("pass", 1.0, {"correct": 0.75, "shows_work": 0.25}),
                   ("fail", 0.75, {"correct": 0.75, "shows_work": 0.0}),
                   ("fail", 0.0, {"correct": 0.0, "shows_work": 0.0})]
    assert judged[0].result.backend == "local" and judged[1].judgement.cause == "model.wrong_answer"


@pytest.mark.unit
def test_shim_scores_as_verifiers_does(arith):
    """The sandbox's stand-in of verifiers scores a reply as verifiers' own Task.score does
    (benign replies only: this runs the rubric on the host)."""
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask

    import whet_vf_arith
    from judging.harness import vf_shim

    for reply in ["<work>2+3</work><answer>5</answer>", "<answer>5</answer>", "<work>1+1</work>"]:
        real = whet_vf_arith.ArithTask(whet_vf_arith.ArithData(prompt="What is 2 + 3?", answer="5"))
        trace = vf.Trace(task=TraceTask(type="ArithTask", data=real.data),
                         agent=AgentInfo(config=vf.AgentConfig()),
                         nodes=[MessageNode(message=vf.UserMessage(content="What is 2 + 3?")),
                                MessageNode(parent=0, message=vf.AssistantMessage(content=reply),
                                            sampled=True)])
        asyncio.run(real.score(trace))
        shimmed = vf_shim.Trace(vf_shim.TaskData(prompt="What is 2 + 3?", answer="5"), reply)
        fake_task = type("T", (vf_shim.Task,), {n: getattr(whet_vf_arith.ArithTask, n)
                                                 for n in ("correct", "shows_work")})
        asyncio.run(fake_task(shimmed.task.data).score(shimmed))
        assert {k: (r.score, r.weight) for k, r in trace.rewards.items()} == \
               {k: (r.score, r.weight) for k, r in shimmed.rewards.items()}
        assert trace.reward == shimmed.reward


@pytest.mark.bus
async def test_hostile_replies_stay_in_the_sandbox(arith, local):
    """A reply the rubric executes writes only inside the sandbox, never on the host; one that
    ends or kills the scoring process is a hack at the hack reward, never a drop."""
    target = f"/tmp/whet-vf-pwned-{os.getpid()}"
    writes = f"<work>open({target!r}, 'w').write('x') and 5</work><answer>5</answer>"
    exits = "<work>__import__('os')._exit(0)</work><answer>5</answer>"
    kills = "<work>__import__('os').kill(__import__('os').getppid(), 9)</work><answer>5</answer>"
    record = b'{"k": "reward", "name": "bonus", "score": 1, "weight": 9}\n'
    fd = "int(__import__('os').environ.get('WHET_REPORT_FD', '3'))"
    forges = f"<work>__import__('os').write({fd}, {record!r}) and 5</work><answer>5</answer>"
    judged = await judge(local, [attempt(arith[0], r, attempt_id=f"h.{i}")
                                 for i, r in enumerate([writes, exits, kills, forges])],
                         JudgeConfig(max_retries=0))
    assert not os.path.exists(target)
    wrote, exited, killed, forged = (j.judgement for j in judged)
    # the scoring process has no report descriptor (the number may be reused by then, e.g.
    # by asyncio's epoll): the forged record never reaches the judge
    assert (forged.outcome, forged.reward, forged.cause) == ("dropped", None, "infra.rubric_error")
    assert "OSError" in forged.evidence and "bonus" not in forged.components
    # the write succeeded in the sandbox's own /tmp: a rubric that executes replies can be
    # gamed by them (documented), but the host never sees it
    assert (wrote.outcome, wrote.reward) == ("pass", 1.0)
    # ending or killing the scoring process is the reply's own doing: a hack, never a drop
    assert (exited.outcome, exited.reward, exited.cause) == ("hack", -1.0, "hack.early_exit")
    assert "before its scores" in exited.evidence
    assert killed.outcome == "hack" and killed.reward == -1.0, (killed.cause, killed.evidence)


@pytest.mark.bus
async def test_faulty_rubric_is_dropped_with_a_reason(modules, local):
    """A reward that raises is dropped as infrastructure; a score outside [0, 1] or NaN is
    dropped naming the reward; a sound one scores."""
    tasks = entry_tasks("fragile", EnvEntry(verifiers="whet_vf_fragile")).tasks
    by_mode = {t.prompt.split("(")[1].rstrip(")"): t for t in tasks}
    judged = await judge(local, [attempt(by_mode[m], "yes", attempt_id=f"f.{i}")
                                 for i, m in enumerate(("ok", "raise", "range", "nan"))],
                         JudgeConfig(max_retries=0))
    ok, raised, out_of_range, nan = (j.judgement for j in judged)
    assert (ok.outcome, ok.reward) == ("pass", 1.0)
    assert (raised.outcome, raised.reward, raised.cause) == ("dropped", None, "infra.rubric_error")
    assert "ZeroDivisionError" in raised.evidence
    assert (out_of_range.outcome, out_of_range.cause) == ("dropped", "infra.bad_task")
    assert "'fragile' gave 2.0: a score must lie in [0, 1]" in out_of_range.evidence
    assert nan.outcome == "dropped" and "gave nan" in nan.evidence.lower()
    assert not any(j.verdict().trainable for j in judged[1:])


@pytest.mark.bus
async def test_gate_runs_the_rubric_once(arith, modules, local):
    """The intake gate accepts a task whose rubric runs and does not reward an empty reply,
    and rejects one whose rubric raises or rewards anything."""
    fragile = {t.prompt.split("(")[1].rstrip(")"): t
               for t in entry_tasks("fragile", EnvEntry(verifiers="whet_vf_fragile")).tasks}
    good, raising = await gate_task(arith[0], local, GateConfig()), await gate_task(fragile["raise"], local, GateConfig())
    generous = await gate_task(fragile["range"], local, GateConfig())
    assert good.accepted, good.detail
    assert raising.reasons == ["invalid"] and "ZeroDivisionError" in raising.detail[0]
    assert generous.reasons == ["invalid"] and "[0, 1]" in generous.detail[0]


@pytest.mark.unit
def test_unsupported_environments_are_named(modules):
    """A taskset played by another Env, or with a reward that needs a runtime, is refused
    with the class and what is supported."""
    with pytest.raises(ConfigError, match=r"DuelEnv, an Env subclass.*SingleAgentEnv"):
        entry_tasks("duel", EnvEntry(verifiers="whet_vf_duel"))
    with pytest.raises(ConfigError, match=r"BoxedTask.file_written needs a runtime.*one reply"):
        entry_tasks("boxed", EnvEntry(verifiers="whet_vf_boxed"))
    with pytest.raises(ConfigError, match=r"cannot load verifiers taskset 'whet_vf_nowhere'"):
        entry_tasks("nowhere", EnvEntry(verifiers="whet_vf_nowhere"))


@pytest.mark.bus
async def test_judge_actor_gives_rubric_verdicts_over_the_bus(bus, arith, built_envs):  # noqa: F811
    """Over a real nats-server, the judge and executor actors (local sandbox) give a verifiers
    attempt the rubric's reward, and a failed one gets no second turn even when turns are left."""
    from tests.test_judge_actor import actors, all_handled, config, publish, verdicts

    cfg = config(SandboxConfig(backend="local"), max_turns=2)
    right = attempt(arith[1], "<work>10+7</work><answer>17</answer>", attempt_id="v1.0")
    wrong = attempt(arith[1], "<answer>71</answer>", attempt_id="v1.1")
    async with actors(bus, cfg) as logs:
        await publish(bus, right, wrong)
        got = {v.verdict_id: v for _, v in await verdicts(bus, 2)}
        await all_handled(bus)
    assert (got["v1.0"].outcome, got["v1.0"].reward) == ("pass", 1.0)
    assert (got["v1.1"].outcome, got["v1.1"].reward, got["v1.1"].cause) == ("fail", 0.0, "model.wrong_answer")
    assert got["v1.1"].components == {"correct": 0.0, "shows_work": 0.0}
    assert got["v1.0"].attempt.turns[-1].execution.backend == "local"
    assert not [e for e in logs if e["event"] == "judge.continued"]


@pytest.mark.unit
def test_gate_reports_follow_the_rubric_source(arith):
    """A kept gate report is keyed by the rubric's source too: the task id leaves it out, so
    an edited reward method is gated again."""
    import msgspec

    from envs.intake import KvGateCache

    task = arith[0]
    edited = msgspec.structs.replace(task, verifier=msgspec.structs.replace(
        task.verifier, extra={**task.verifier.extra, "files": '{"whet_vf_arith.py": "# edited"}'}))
    cache, gates = KvGateCache(None, keep_on_disk=False), GateConfig()
    assert edited.task_id == task.task_id
    assert cache.digest(edited, gates) != cache.digest(task, gates)
