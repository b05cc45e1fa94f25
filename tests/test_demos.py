"""Demonstrations for the warm start: training split only, judged passes, real tool results."""

from __future__ import annotations

import random
import re
import subprocess
from contextlib import asynccontextmanager
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from bus.errors import InputError
from bus.messages import Demo, DemoMessage
from envs.demos import make_demos, read_demos, write_demos
from policy.chat import char_chat_format
from policy.sft import demo_ids
from envs.demos.answers import answer_demos
from envs.demos.episodes import episode_demo, well_formed
from envs.environment import generate
from envs.intake import collect
from envs.repository import ENVIRONMENT as REPOSITORY
from envs.repository.agent import hunks, plan
from judging import kinds, repo
from judging.config import JudgeConfig
from judging.episode import judge_episode, run_episode, scripted
from judging.tools import parse_call
from runtime import config as config_mod
from sandbox import open_backend
from sandbox.config import SandboxConfig
from sandbox.session import count_tests, open_session
from sandbox.workspace import WorkspaceCache

from tests.support.sandbox_fixtures import built_envs  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
CONFIG = """
[envs]
mix = { data = 0.5, structured = 0.5, repository = 1.0 }
[envs.gates]
checks = ["determinism"]
keep_reports = false
[envs.use.data_scripts]
count = 24
levels = [0, 1]
heldout_share = 0.3
validation_share = 0.3
[envs.use.structured_output]
count = 24
levels = [0, 1]
heldout_share = 0.3
validation_share = 0.3
[envs.use.repository]
count = 24
heldout_share = 0.3
validation_share = 0.3
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "demos.toml"
    path.write_text(CONFIG)
    return path


@asynccontextmanager
async def _local():
    """A local backend and a workspace cache. Opened only while no other backend of this
    process is: closing a local backend removes the process's cgroup folder, which a second
    one open beside it still uses."""
    backend = await open_backend(SandboxConfig(backend="local"), slots=2)
    cache = WorkspaceCache()
    try:
        yield backend, cache
    finally:
        cache.close()
        with anyio.CancelScope(shield=True):
            await backend.aclose()


def _untimed(text: str) -> str:
    """A message without the seconds unittest reports (they differ between two runs)."""
    return re.sub(r"(Ran \d+ tests?) in [\d.]+s", r"\1", text)


async def _made(config_file: Path, domains: list[str], limit: int, per_task: int = 1):
    cfg = config_mod.load(config_file)
    return cfg, await make_demos(cfg.envs, cfg.executor.sandbox, seed=cfg.run.seed,
                                 judge=cfg.judge, domains=domains, per_task=per_task, limit=limit)


@pytest.mark.bus
async def test_no_demonstration_comes_from_a_heldout_or_validation_task(config_file, built_envs):  # noqa: F811
    """Every demo's task is a training task; none is in the evaluator's held-out or validation sets."""
    cfg, made = await _made(config_file, [], limit=2)
    seed = cfg.run.seed
    heldout = {t.task_id for t, _ in collect(cfg.envs, seed=seed, split="heldout")[0]}
    validation = {t.task_id for t, _ in collect(cfg.envs, seed=seed, split="validation")[0]}
    train = {t.task_id for t, _ in collect(cfg.envs, seed=seed, split="train")[0]}
    ids = {d.task_id for d in made.demos}
    assert heldout and validation and {d.domain for d in made.demos} == {"data", "structured",
                                                                         "repository"}
    assert not ids & heldout and not ids & validation
    assert ids <= train and all(d.split == "train" for d in made.demos)


@pytest.mark.bus
async def test_repository_demos_replay_to_the_same_results_and_pass_hidden_tests(config_file, built_envs):  # noqa: F811
    """Replaying a repository demo's assistant turns in a fresh sandbox session gives exactly its
    tool messages and a final workspace that passes every hidden test; each turn is one tool call."""
    cfg, made = await _made(config_file, ["repository"], limit=2, per_task=2)
    tasks = {t.task_id: t for t, _ in collect(cfg.envs, seed=cfg.run.seed, split="train")[0]}
    assert len(made.demos) == 4 and made.domains["repository"].kept == 4
    orders = set()
    async with _local() as (backend, cache):
        for demo in made.demos:
            said = [m.content for m in demo.messages if m.role == "assistant"]
            assert all(c.endswith("</tool_call>") and c.count("<tool_call>") == 1
                       and not isinstance(parse_call(c), str) for c in said)
            assert [m.role for m in demo.messages] == \
                ["user"] + ["assistant", "tool"] * (len(said) - 1) + ["assistant"]
            ids, trained = demo_ids(demo, char_chat_format(64), ["</tool_call>"])  # SFT takes it
            assert any(trained) and not all(trained)
            task = tasks[demo.task_id]
            assert demo.messages[0].content == task.prompt
            log = await run_episode(scripted(said), task, await open_session(cache, backend, task))
            assert [_untimed(m["content"]) for m in log.messages[:-1]] == \
                    [_untimed(m.content) for m in demo.messages]
            outcome = await judge_episode(task, log, backend)
            hidden = outcome.per_layer["hidden"]
            assert outcome.outcome == "pass" and hidden[0] == hidden[1] > 0
            orders.add(tuple(parse_call(c).name for c in said))
    assert len(orders) > 1, "the demos of a task should vary their order"


@pytest.mark.bus
async def test_a_wrong_first_edit_is_shown_by_the_tests_then_repaired(built_envs):  # noqa: F811
    """A demo asked for a wrong first edit makes one, a test run shows failures, the repair passes."""
    async with _local() as (backend, cache):
        for task in generate(REPOSITORY, 12, seed=5):
            made = await episode_demo(task, REPOSITORY, backend, cache, random.Random(1), True)
            if made.demo is not None and made.demo.repaired:
                break
        else:
            pytest.fail("no repository task of 12 gave a repaired demo")
    messages = made.demo.messages
    calls = [parse_call(m.content).name for m in messages if m.role == "assistant"]
    runs = [count_tests(messages[i + 1].content) for i, m in enumerate(messages)
            if m.role == "assistant" and parse_call(m.content).name == "run_tests"]
    first_edit = next(i for i, name in enumerate(calls) if name in ("replace", "write_file"))
    after_edit = [count_tests(messages[2 * i + 2].content) for i, name in enumerate(calls)
                  if name == "run_tests" and i > first_edit][0]
    assert after_edit[0] < after_edit[1], "the wrong edit should fail a visible test"
    assert runs[-1][0] == runs[-1][1] == 4 and sum(n in ("replace", "write_file") for n in calls) >= 2
    assert "not right yet" in messages[2 * (calls.index("run_tests", first_edit) + 1) + 1].content


@pytest.mark.bus
async def test_single_turn_demos_pass_the_judge_and_a_wrong_answer_is_left_out(config_file, built_envs):  # noqa: F811
    """Reference answers are fenced blocks the judge passes; an answer the judge fails gives no demo."""
    cfg, made = await _made(config_file, ["data", "structured"], limit=1)
    assert len(made.demos) == 2 and {d.source for d in made.demos} == {"reference"}
    for demo in made.demos:
        assert [m.role for m in demo.messages] == ["user", "assistant"]
        assert demo.messages[1].content.startswith("```") and demo.messages[1].content.endswith("```")
    tasks = [t for t, _ in collect(cfg.envs, seed=cfg.run.seed, split="train")[0]
             if t.task_id in {d.task_id for d in made.demos}]
    broken = [msgspec.structs.replace(t, verifier=msgspec.structs.replace(
        t.verifier, reference="{}" if kinds.of(t).attempt == "document" else "print(0)\n"))
        for t in tasks]
    async with _local() as (backend, _):
        again = await answer_demos(tasks, backend, JudgeConfig())
        wrong = await answer_demos(broken, backend, JudgeConfig())
    assert all(d is not None and d.outcome == "pass" for d in again)
    assert wrong == [None, None]


@pytest.mark.unit
def test_the_plan_varies_with_the_rng_and_its_edits_make_the_reference():
    """Two rngs order one task's turns differently; the fix's hunks turn the workspace into the reference."""
    task = next(generate(REPOSITORY, 1, seed=5))
    reference = repo.files_of(task.verifier.reference)
    files = dict(task.files)
    for h in hunks(files, reference):
        files = h.apply(files)
    assert {p: files[p] for p in reference} == reference
    orders = {tuple(s.call for s in plan(task, random.Random(i))) for i in range(6)}
    assert len(orders) > 1
    assert well_formed([DemoMessage(role="assistant", content=f"ok\n{s.call}")
                        for s in plan(task, random.Random(0))])
    assert not well_formed([DemoMessage(role="assistant", content='<tool_call>{"name": "x"}')])


@pytest.mark.unit
def test_read_demos_names_the_file_and_line_of_a_bad_line(tmp_path):
    """A written file reads back whole; a bad line stops the read naming file and line."""
    demo = Demo(task_id="t", env="e", domain="d", split="train", level=0, source="reference",
                messages=[DemoMessage(role="user", content="p"),
                          DemoMessage(role="assistant", content="a")])
    path = tmp_path / "demos.jsonl"
    write_demos(path, [demo, demo])
    assert read_demos(path) == [demo, demo]
    path.write_bytes(path.read_bytes() + b'{"t": "whet.demo.v1", "task_id": "x"}\n')
    with pytest.raises(InputError, match=r"demos\.jsonl:3: not a demonstration"):
        read_demos(path)


def _whet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.cli", "demos", *args], cwd=ROOT,
                          text=True, capture_output=True, timeout=120)


@pytest.mark.bus
def test_whet_demos_writes_a_file_read_demos_reads(config_file, tmp_path, built_envs):  # noqa: F811
    """`whet demos` writes JSON lines of Demo and prints one summary line; without --limit
    the config's [warmstart] tasks_per_domain bounds the tasks."""
    out = tmp_path / "out" / "demos.jsonl"
    r = _whet("--config", str(config_file), "--out", str(out), "--domains", "structured",
              "--limit", "2")
    assert r.returncode == 0, r.stderr
    assert len(read_demos(out)) == 2
    assert r.stdout.count("\n") == 1 and "structured: 2 tasks, 2 kept, 0 failed" in r.stdout
    config_file.write_text(CONFIG + "[warmstart]\ntasks_per_domain = 1\n")
    r = _whet("--config", str(config_file), "--out", str(out), "--domains", "structured")
    assert r.returncode == 0, r.stderr
    assert len(read_demos(out)) == 1 and "structured: 1 tasks, 1 kept" in r.stdout


@pytest.mark.unit
def test_whet_demos_refuses_bad_input_with_one_line_and_exit_2(config_file, tmp_path):
    """A missing config or an unknown domain is one line on stderr and exit status 2."""
    out = str(tmp_path / "demos.jsonl")
    missing = _whet("--config", str(tmp_path / "nope.toml"), "--out", out)
    unknown = _whet("--config", str(config_file), "--out", out, "--domains", "poetry")
    for r, says in ((missing, "nope.toml: cannot read"), (unknown, "'poetry': no enabled environment")):
        assert r.returncode == 2 and says in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert not Path(out).exists()
