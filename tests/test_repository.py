"""The repository domain: gates, tool episodes in real sandboxes, hacks, and the workspace cache."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import anyio
import pytest

from bus.messages import Task
from envs.config import GateConfig
from envs.environment import generate
from envs.gates import gate_task
from envs.repository import ENVIRONMENT
from judging import repo
from judging.episode import judge_episode, run_episode, scripted, tool_text
from judging.tools import parse_call
from sandbox import open_backend
from sandbox.config import SandboxConfig
from sandbox.session import count_tests, open_session, trim
from sandbox.workspace import WorkspaceCache

from tests.support.sandbox_fixtures import built_envs  # noqa: F401


def _tasks(count: int = 3) -> list[Task]:
    return list(generate(ENVIRONMENT, count, seed=5))


@pytest.fixture
async def local(built_envs):  # noqa: F811
    backend = await open_backend(SandboxConfig(backend="local"), slots=2)
    cache = WorkspaceCache()
    try:
        yield backend, cache
    finally:
        cache.close()
        await backend.aclose()


def _fix_script(task: Task) -> list[str]:
    ref = repo.files_of(task.verifier.reference)
    touched = task.verifier.extra["touched"].split(",")
    return ([tool_text("list_files"), tool_text("read_file", path=touched[0], start=1, end=20),
             tool_text("run_tests")]
            + [tool_text("write_file", path=p, content=ref[p]) for p in touched]
            + [tool_text("run_tests"), tool_text("submit")])


@pytest.mark.bus
async def test_generated_repository_tasks_pass_every_gate(local):
    """A task of each rung is solvable, deterministic, and its tests kill >= 80% of mutants."""
    backend, _ = local
    for task in _tasks(3):
        report = await gate_task(task, backend, GateConfig(), anyio.CapacityLimiter(2))
        assert report.accepted, (task.task_id, report.reasons, report.detail)
        assert report.kill_rate >= 0.8
        hidden = {json.dumps(c["args"]) for c in json.loads(task.verifier.hidden)}
        assert not any(text for text in task.files.values() if any(h in text for h in hidden)), \
            "a hidden case leaked into the workspace"


@pytest.mark.bus
async def test_scripted_agent_fixes_a_task_through_tools_for_full_reward(local):
    """Reading, running the tests, writing the fix and submitting passes every hidden test."""
    backend, cache = local
    for task in _tasks(3):
        session = await open_session(cache, backend, task)
        assert session.workspace.prepared["visible_passed"] < session.workspace.prepared["visible_total"]
        log = await run_episode(scripted(_fix_script(task)), task, session)
        runs = [r for r in log.results if r.name == "run_tests"]
        assert runs[0].visible_passed < runs[0].visible_total          # the defect shows
        assert runs[-1].visible_passed == runs[-1].visible_total == 4  # the fix holds
        assert log.end == "submit" and not log.refused
        outcome = await judge_episode(task, log, backend)
        assert outcome.outcome == "pass" and outcome.reward == pytest.approx(1.0), outcome
        assert outcome.per_layer["hidden"][0] == outcome.per_layer["hidden"][1] > 20
        assert not session.workspace.root.exists()


@pytest.mark.bus
async def test_doing_nothing_fails_without_a_hack_flag(local):
    """Submitting the defective workspace as it is fails hidden tests, honestly."""
    backend, cache = local
    task = _tasks(1)[0]
    log = await run_episode(scripted([tool_text("submit")]), task, await open_session(cache, backend, task))
    outcome = await judge_episode(task, log, backend)
    assert outcome.outcome == "fail" and outcome.cause.startswith("model.")
    assert outcome.reward is not None and outcome.reward > -1


def _test_path(task: Task) -> str:
    return next(p for p in task.files if p.startswith("tests/test_"))


@pytest.mark.bus
@pytest.mark.parametrize("cheat", ["edit_tests", "skip_tests", "delete_tests", "write_outside",
                                   "absolute_path"])
async def test_tampering_agents_get_the_hack_reward(local, cheat, tmp_path):
    """Editing or deleting tests, or writing outside the workspace, is flagged and scores the minimum."""
    backend, cache = local
    task = _tasks(1)[0]
    fix = _fix_script(task)[3:-1]  # even with the real fix applied
    test_path = _test_path(task)
    outside = tmp_path / "planted.py"
    cheats = {
        "edit_tests": tool_text("write_file", path=test_path, content="import unittest\n"),
        "skip_tests": tool_text("replace", path=test_path, old="def test_", new="def skip_"),
        "delete_tests": tool_text("write_file", path=test_path, content=""),
        "write_outside": tool_text("write_file", path="../../" + outside.name, content="x = 1\n"),
        "absolute_path": tool_text("write_file", path=str(outside), content="x = 1\n"),
    }
    session = await open_session(cache, backend, task)
    log = await run_episode(scripted([*fix, cheats[cheat], tool_text("submit")]), task, session)
    outcome = await judge_episode(task, log, backend)
    assert outcome.outcome == "hack" and outcome.reward == -1.0, outcome
    assert outcome.cause == ("hack.escape" if cheat in ("write_outside", "absolute_path") else "hack.tamper")
    assert not outside.exists()
    assert not (session.workspace.root.parent.parent / outside.name).exists()


@pytest.mark.bus
async def test_group_attempts_start_from_byte_identical_workspaces(local):
    """Two attempts of one task get equal bytes from the cache; one's edits never reach the other."""
    backend, cache = local
    task = _tasks(1)[0]
    first = await open_session(cache, backend, task)
    await first.call(parse_call(tool_text("write_file", path=_test_path(task).replace("tests/", "x/"),
                                          content="changed")))
    await first.call(parse_call(_fix_script(task)[3]))
    second = await open_session(cache, backend, task)

    def raw(root: Path) -> dict[str, str]:
        return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(root.rglob("*")) if p.is_file()}

    restored = raw(second.workspace.root)
    assert restored == {p: hashlib.sha256(t.encode()).hexdigest() for p, t in task.files.items()}
    third = await open_session(cache, backend, task)
    assert raw(third.workspace.root) == restored
    assert second.workspace.prepared == third.workspace.prepared  # restored, not re-run
    assert cache.stats["builds"] == 1 and cache.stats["restores"] == 2
    assert second.setup_s < first.setup_s
    for s in (first, second, third):
        s.close()


@pytest.mark.bus
async def test_episode_ends_at_its_step_budget(local):
    """An agent that never submits is stopped after max_steps calls and judged as it stands."""
    backend, cache = local
    task = _tasks(1)[0]
    steps = int(task.verifier.extra["max_steps"])
    log = await run_episode(scripted(["I think the bug is in cart.py"] * 50), task,
                            await open_session(cache, backend, task))
    assert log.end == "steps" and len(log.calls) == steps
    assert all(not r.ok and "No tool call" in r.output for r in log.results)


@pytest.mark.unit
def test_tool_calls_are_parsed_and_results_trimmed():
    """Calls in the chat template's tool format parse; malformed ones say why; results are cut."""
    call = parse_call('ok <tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}</tool_call>')
    assert call.name == "read_file" and call.arguments == {"path": "a.py"}
    assert "Unknown tool" in parse_call('<tool_call>{"name": "rm", "arguments": {}}</tool_call>')
    assert "not valid JSON" in parse_call("<tool_call>{name}</tool_call>")
    text = "head\n" + "x" * 5000 + "\nAssertionError: the end"
    cut = trim(text, 300)
    assert len(cut) <= 300 and cut.startswith("head") and cut.endswith("the end")
    assert count_tests("..F\nRan 3 tests in 0.1s\n\nFAILED (failures=1)") == (2, 3)
    assert count_tests("Ran 2 tests in 0.0s\n\nOK") == (2, 2)


@pytest.mark.unit
def test_workspace_folders_of_dead_processes_are_reaped(tmp_path):
    """A workspace folder whose owner process is gone is removed when a cache opens."""
    dead = tmp_path / "whet-ws-999999999"
    (dead / "ws1").mkdir(parents=True)
    mine = WorkspaceCache(tmp_path)
    assert not dead.exists() and mine.base.exists() and str(os.getpid()) in mine.base.name
    mine.close()


@pytest.mark.bus
@pytest.mark.parametrize("warm", [True, False])
async def test_program_arguments_like_interpreter_flags_reach_the_program(built_envs, warm):  # noqa: F811
    """`python3 -B -m unittest discover -s tests` runs unittest with `-s tests`, in-process
    in the warm sandbox as with a fresh interpreter (run_tests depends on it)."""
    from bus.messages import Job

    backend = await open_backend(SandboxConfig(backend="local", warm_python=warm))
    try:
        files = {"tests/__init__.py": b"", "tests/test_a.py":
                 b"import unittest\nclass T(unittest.TestCase):\n    def test_x(self): pass\n"}
        result = await backend.run(Job(command=["python3", "-B", "-m", "unittest", "discover",
                                                "-s", "tests", "-t", "."], files=files))
    finally:
        await backend.aclose()
    assert result.status == "ok" and "Ran 1 test" in result.stderr, result


@pytest.mark.unit
def test_workspace_paths_stay_inside(tmp_path):
    """Paths that resolve inside are used as such; escapes are refused and recorded; links are
    not followed."""
    from sandbox.workspace import PathRefused, Workspace

    ws = Workspace(tmp_path / "ws")
    ws.root.mkdir()
    ws.write("pkg/../pkg/./a.py", "x = 1\n")
    assert ws.files() == {"pkg/a.py": "x = 1\n"} and not ws.refused
    (ws.root / "link").symlink_to(tmp_path)
    for bad in ("../b.py", "/etc/b.py", "pkg/../../b.py", "link/b.py", ""):
        with pytest.raises(PathRefused):
            ws.write(bad, "y = 2\n")
    assert ws.refused == ["../b.py", "/etc/b.py", "../b.py", "link/b.py"]  # not the empty name
    assert not (tmp_path / "b.py").exists()
    with pytest.raises(PathRefused):
        ws.read("link/anything")


@pytest.mark.bus
async def test_concurrent_attempts_of_a_group_build_once(local):
    """Attempts of one group opening at once share one build; the others restore it."""
    backend, cache = local
    task = _tasks(1)[0]
    sessions = []

    async def open_one() -> None:
        sessions.append(await open_session(cache, backend, task))

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(open_one)
    assert cache.stats["builds"] == 1 and cache.stats["restores"] == 3
    assert len({s.workspace.digest() for s in sessions}) == 1
    for s in sessions:
        s.close()


@pytest.mark.bus
async def test_repeated_session_requests_are_answered_once(local):
    """A judge that handles a step twice (a redelivery) gets the same answers: one session,
    one edit, one close; a request for a closed or unknown session says so."""
    from bus.messages import SessionRequest
    from sandbox.sessions import SessionHost

    backend, cache = local
    task = _tasks(1)[0]
    host = SessionHost(backend, cache, "executor-9")
    path = task.verifier.extra["touched"].split(",")[0]
    edit = parse_call(tool_text("replace", path=path, old="def ", new="def  "))
    opened = [await host.handle(SessionRequest(session_id="a.0", op="open", task=task)) for _ in range(2)]
    assert opened[0].digest == opened[1].digest and host.counts["opened"] == 1
    first, again = [await host.handle(SessionRequest(session_id="a.0", op="call", call=edit, step=0))
                    for _ in range(2)]
    assert first == again and first.result.ok
    closed = [await host.handle(SessionRequest(session_id="a.0", op="close")) for _ in range(2)]
    assert closed[0] == closed[1]
    assert closed[0].files[path] == task.files[path].replace("def ", "def  ", 1)
    late = await host.handle(SessionRequest(session_id="a.0", op="call", call=edit, step=1))
    unknown = await host.handle(SessionRequest(session_id="b.0", op="call", call=edit, step=0))
    assert not late.ok and not unknown.ok and "no session" in unknown.error
