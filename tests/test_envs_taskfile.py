"""Task files and `whet tasks`: a broken line is named (line and field), the rest is kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from envs import registry, taskfile
from envs.config import EnvEntry
from envs.environment import generate

ROOT = Path(__file__).resolve().parent.parent


def _whet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def _good_lines(n: int) -> list[str]:
    env = registry.resolve("structured_output", EnvEntry())
    return [msgspec.json.encode(t).decode() for t in generate(env, n, seed=5)]


def _broken_file(tmp_path: Path) -> Path:
    good = _good_lines(3)
    bad_kind = json.loads(good[1])
    bad_kind["verifier"]["kind"] = 7
    no_prompt = json.loads(good[2])
    del no_prompt["prompt"]
    lines = [good[0], json.dumps(bad_kind), "{not json", good[1], json.dumps(no_prompt),
             "", good[2]]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.unit
def test_broken_lines_are_named_and_the_rest_is_read(tmp_path):
    """Each bad line gives an error with file, line and field; good lines all come through."""
    found = taskfile.read(_broken_file(tmp_path))
    assert len(found.tasks) == 3
    errors = [str(e) for e in found.errors]
    assert len(errors) == 3, errors
    assert errors[0].endswith("tasks.jsonl:2: verifier.kind: Expected `str`, got `int`")
    assert ":3: not JSON" in errors[1]
    assert errors[2].endswith("tasks.jsonl:5: prompt: required field missing")


@pytest.mark.unit
def test_repeated_ids_and_wrong_versions_are_named(tmp_path):
    """A repeated task id and a task of an unknown schema version are errors, not crashes."""
    good = _good_lines(1)[0]
    newer = json.loads(good)
    newer["t"] = "whet.task.v9"
    newer["task_id"] = "x/other"
    found = taskfile.read_text("\n".join([good, good, json.dumps(newer)]), "f.jsonl")
    assert len(found.tasks) == 1
    assert "f.jsonl:2: task_id:" in str(found.errors[0]) and "repeats line 1" in str(found.errors[0])
    assert "f.jsonl:3: t:" in str(found.errors[1]) and "whet.task.v1" in str(found.errors[1])


@pytest.mark.unit
def test_whet_tasks_check_reports_each_task_and_each_bad_line(tmp_path):
    """`whet tasks check` gates the good tasks, names the bad lines, and exits 1."""
    result = _whet("tasks", "check", str(_broken_file(tmp_path)), "--json", cwd=ROOT)
    assert result.returncode == 1, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(reports) == 3 and all(r["accepted"] for r in reports)
    assert all(r["killed"] == r["mutants"] > 0 for r in reports)
    assert "tasks.jsonl:2: verifier.kind" in result.stderr
    assert "tasks.jsonl:5: prompt: required field missing" in result.stderr
    assert "3 tasks checked, 3 bad lines" in result.stderr


@pytest.mark.bus
def test_whet_tasks_generate_writes_gated_tasks(tmp_path):
    """`whet tasks generate ENV --count N` writes N tasks that read back cleanly."""
    out = tmp_path / "gen.jsonl"
    result = _whet("tasks", "generate", "structured_output", "--count", "4", "--out", str(out),
                   cwd=ROOT)
    assert result.returncode == 0, result.stderr
    found = taskfile.read(out)
    assert len(found.tasks) == 4 and not found.errors
    assert "4 tasks written" in result.stderr


@pytest.mark.unit
def test_whet_tasks_import_humaneval(tmp_path):
    """The wheel's HumanEval imports as 164 held-out tasks; a broken line is named."""
    out = tmp_path / "he.jsonl"
    result = _whet("tasks", "import", "humaneval", "--out", str(out), cwd=ROOT)
    assert result.returncode == 0, result.stderr
    tasks = taskfile.read(out).tasks
    assert len(tasks) == 164 and {t.split for t in tasks} == {"heldout"}
    assert {t.verifier.kind for t in tasks} == {"python_check"}
    source = tmp_path / "mini.jsonl"
    record = {"task_id": "M/0", "prompt": "def f():\n", "canonical_solution": "    return 1\n",
              "test": "def check(candidate):\n    assert candidate() == 1\n", "entry_point": "f"}
    broken = dict(record, task_id="M/1")
    del broken["entry_point"]
    source.write_text(json.dumps(record) + "\n" + json.dumps(broken) + "\n")
    result = _whet("tasks", "import", "humaneval", str(source), "--out", str(out), cwd=ROOT)
    assert len(taskfile.read(out).tasks) == 1
    assert "mini.jsonl:2: entry_point" in result.stderr, result.stderr


@pytest.mark.unit
def test_a_training_task_list_keeps_only_its_tasks_and_names_ids_it_cannot_find(tmp_path):
    """With `[envs] train_ids`, the training split holds exactly the listed tasks; held-out
    tasks are untouched, and a listed id no environment yields is named with its line."""
    from envs.config import EnvsConfig
    from envs.intake import collect

    envs = EnvsConfig(use={"structured_output": EnvEntry(count=40, heldout_share=0.25)},
                      mix={"structured": 1.0})
    every, _ = collect(envs, seed=3, split="train")
    chosen = sorted(t.task_id for t, _ in every[::3])
    listed = tmp_path / "train_ids.txt"
    listed.write_text("# the training set\n" + "\n".join(chosen) + "\n\nno-such-task\n")
    restricted = msgspec.structs.replace(envs, train_ids=str(listed))
    kept, errors = collect(restricted, seed=3, split="train")
    assert sorted(t.task_id for t, _ in kept) == chosen and len(chosen) < len(every)
    (error,) = errors
    assert (error.source, error.line) == (str(listed), len(chosen) + 3) and "no-such-task" in str(error)
    held, _ = collect(envs, seed=3, split="heldout")
    assert [t for t, _ in collect(restricted, seed=3, split="heldout")[0]] == [t for t, _ in held]
    assert held


@pytest.mark.unit
def test_an_unreadable_training_task_list_is_named(tmp_path):
    """A train_ids file that cannot be read is one error naming the file; `whet up`'s
    preflight names the key and the fix before anything starts."""
    from bus.errors import InputError
    from envs.config import EnvsConfig
    from envs.intake import collect
    from runtime.config import RunConfig
    from runtime.stack import preflight

    missing = str(tmp_path / "absent.txt")
    with pytest.raises(InputError, match="absent.txt: cannot read"):
        collect(EnvsConfig(train_ids=missing), seed=0, split="train")
    cfg = RunConfig()
    cfg = msgspec.structs.replace(cfg, envs=msgspec.structs.replace(cfg.envs, train_ids=missing),
                                  actors=msgspec.structs.replace(cfg.actors, count={"sampler": 1}))
    (problem,) = preflight.task_list_problems(cfg)
    assert problem.where == "envs.train_ids" and missing in problem.what
    listed = tmp_path / "ids.txt"
    real, _ = collect(RunConfig().envs, seed=0, split="train")
    listed.write_text(f"{real[0][0].task_id}\na-task\n")  # one id found: the sampler names the other
    cfg = msgspec.structs.replace(cfg, envs=msgspec.structs.replace(cfg.envs, train_ids=str(listed)))
    assert preflight.task_list_problems(cfg) == []
    cfg = msgspec.structs.replace(cfg, envs=msgspec.structs.replace(cfg.envs, skip_ids=missing))
    (problem,) = preflight.task_list_problems(cfg)
    assert problem.where == "envs.skip_ids" and missing in problem.what


@pytest.mark.unit
def test_a_training_list_made_under_another_seed_is_refused_before_the_run_starts(tmp_path):
    """`[run] seed` generates the tasks: a list of another seed's ids names no training task
    of this config, and `whet up` would wait with an empty pool. Preflight refuses it, naming
    the key, the seed, the first id it cannot find, and `sampling_seed` for other draws."""
    from envs.config import EnvsConfig
    from envs.intake import collect
    from runtime.config import RunConfig
    from runtime.sections import RunSection
    from runtime.stack import preflight

    envs = EnvsConfig(use={"structured_output": EnvEntry(count=40, heldout_share=0.25)},
                      mix={"structured": 1.0})
    other, _ = collect(envs, seed=3, split="train")
    listed = tmp_path / "train_ids.txt"
    listed.write_text("".join(f"{t.task_id}\n" for t, _ in other[:4]))
    cfg = RunConfig(run=RunSection(seed=4), envs=msgspec.structs.replace(envs, train_ids=str(listed)))
    cfg = msgspec.structs.replace(cfg, actors=msgspec.structs.replace(cfg.actors, count={"sampler": 1}))
    (problem,) = preflight.task_list_problems(cfg)
    assert problem.where == "envs.train_ids" and "[run] seed 4" in problem.what
    assert other[0][0].task_id in problem.what and "sampling_seed" in problem.fix
    same = msgspec.structs.replace(cfg, run=RunSection(seed=3, sampling_seed=4))
    assert preflight.task_list_problems(same) == []


@pytest.mark.unit
def test_a_skip_list_leaves_its_tasks_out_of_training_only(tmp_path):
    """With `[envs] skip_ids`, the training split loses exactly the listed tasks (an unknown
    id is no error: a warm start lists what it demonstrated); held-out is untouched."""
    from envs.config import EnvsConfig
    from envs.intake import collect

    envs = EnvsConfig(use={"structured_output": EnvEntry(count=40, heldout_share=0.25)},
                      mix={"structured": 1.0})
    every, _ = collect(envs, seed=3, split="train")
    left_out = {t.task_id for t, _ in every[::4]}
    listed = tmp_path / "skip.txt"
    listed.write_text("\n".join(sorted(left_out)) + "\nno-such-task\n")
    skipping = msgspec.structs.replace(envs, skip_ids=str(listed))
    kept, errors = collect(skipping, seed=3, split="train")
    assert errors == [] and left_out
    assert [t.task_id for t, _ in kept] == [t.task_id for t, _ in every if t.task_id not in left_out]
    assert [t for t, _ in collect(skipping, seed=3, split="heldout")[0]] == \
        [t for t, _ in collect(envs, seed=3, split="heldout")[0]]
