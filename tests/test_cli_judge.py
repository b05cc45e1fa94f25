"""`whet judge` as a user runs it: task file, samples file, one verdict per attempt."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from envs.humaneval import wheel_path
from tests.support.judging import io_task
from tests.support.sandbox_fixtures import built_envs  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


def whet(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], cwd=ROOT, env=env,
                          text=True, capture_output=True, timeout=300)


@pytest.mark.bus
@pytest.mark.usefixtures("built_envs")
def test_judging_a_humaneval_samples_file_prints_one_verdict_per_attempt(tmp_path):
    """Good samples are judged, bad lines are named on stderr (exit 1), and JSON output parses."""
    rows = [json.loads(line) for line in gzip.open(wheel_path(), "rt")][:3]
    tasks = tmp_path / "HumanEval.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"task_id": r["task_id"], "completion": r["canonical_solution"]}) + "\n"
                               for r in rows)
                       + json.dumps({"task_id": "HumanEval/0", "completion": "    return 1 / 0\n"}) + "\n"
                       + "{broken\n" + json.dumps({"task_id": "HumanEval/99", "completion": ""}) + "\n")
    text = whet("judge", str(tasks), str(samples))
    assert text.returncode == 1, text.stderr
    lines = text.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["humaneval/HumanEval/0#1", "pass"], ["humaneval/HumanEval/1#2", "pass"],
        ["humaneval/HumanEval/2#3", "pass"], ["humaneval/HumanEval/0#4", "fail"]]
    assert "model.runtime_error" in lines[3]
    assert f"{samples}:5" in text.stderr and f"{samples}:6: task_id" in text.stderr
    assert "judged 4: fail 1, pass 3" in text.stderr
    as_json = whet("judge", str(tasks), str(samples), "--json")
    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r["reward"] for r in records] == [1.0, 1.0, 1.0, records[3]["reward"]] and records[3]["reward"] < 0.5
    assert records[0]["layers"][2]["name"] == "hidden" and records[0]["layers"][2]["ok"]


@pytest.mark.bus
@pytest.mark.usefixtures("built_envs")
def test_judging_whetstone_task_records(tmp_path):
    """A file of Task records (as `whet tasks generate` writes) is read as such."""
    task = io_task([([[1, 2]], 3)], [([[4]], 4)], "def f(xs):\n    return sum(xs)\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(msgspec.json.encode(task) + b"\n")
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": "test/f", "completion": "```python\ndef f(xs):\n    return sum(xs)\n```"}) + "\n")
    out = whet("judge", str(tasks), str(samples), "--json")
    assert out.returncode == 0, out.stderr
    [record] = [json.loads(line) for line in out.stdout.splitlines()]
    assert (record["outcome"], record["reward"]) == ("pass", 1.0)


HOSTNAME = io_task([([], "sandbox")], [([], "sandbox")], "def f():\n    return 'sandbox'\n")
PROBE = "import socket\n\ndef f():\n    return socket.gethostname()\n"


def _probe_files(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(msgspec.json.encode(HOSTNAME) + b"\n")
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": "test/f", "completion": PROBE}) + "\n")
    return str(tasks), str(samples)


@pytest.mark.bus
@pytest.mark.usefixtures("built_envs")
def test_judging_runs_in_the_sandbox_unless_told_otherwise(tmp_path):
    """With no --backend the attempt runs in the local sandbox (its host name is 'sandbox');
    a plain --backend subprocess is refused, saying how; --unsafe-subprocess runs it on this
    host (another host name) with a warning on stderr."""
    tasks, samples = _probe_files(tmp_path)
    default = whet("judge", tasks, samples, "--json")
    assert default.returncode == 0, default.stderr
    assert json.loads(default.stdout)["outcome"] == "pass" and "WARNING" not in default.stderr
    refused = whet("judge", tasks, samples, "--backend", "subprocess")
    assert refused.returncode == 2 and refused.stdout == ""
    assert "--unsafe-subprocess" in refused.stderr and "without isolation" in refused.stderr
    unsafe = whet("judge", tasks, samples, "--json", "--unsafe-subprocess")
    assert unsafe.returncode == 0, unsafe.stderr
    assert "WARNING" in unsafe.stderr and "unisolated" in unsafe.stderr
    assert json.loads(unsafe.stdout)["cause"] == "model.wrong_answer"  # the host's own name


@pytest.mark.unit
def test_a_config_naming_subprocess_is_refused_without_the_flag(tmp_path):
    """The config's backend is the default, but it cannot bring in subprocess silently."""
    tasks, samples = _probe_files(tmp_path)
    config = tmp_path / "plain.toml"
    config.write_text('[executor.sandbox]\nbackend = "subprocess"\n')
    refused = whet("judge", tasks, samples, "-c", str(config))
    assert refused.returncode == 2 and "[executor.sandbox]" in refused.stderr
    assert "--unsafe-subprocess" in refused.stderr


@pytest.mark.bus
@pytest.mark.usefixtures("built_envs")
def test_quality_on_gives_a_pass_its_components_and_a_failure_none(tmp_path):
    """`whet judge --json -c configs/quality.toml`: canonical HumanEval passes carry lint, types
    and runtime; a failing attempt carries none of them."""
    with gzip.open(wheel_path(), "rt") as lines:
        rows = [json.loads(line) for line in lines][:2]
    tasks = tmp_path / "HumanEval.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"task_id": r["task_id"], "completion": r["canonical_solution"]}) + "\n"
                               for r in rows)
                       + json.dumps({"task_id": "HumanEval/0", "completion": "    return 1 / 0\n"}) + "\n")
    out = whet("judge", str(tasks), str(samples), "--json", "-c", str(ROOT / "configs" / "quality.toml"))
    assert out.returncode == 0, out.stderr
    good, other, bad = [json.loads(line) for line in out.stdout.splitlines()]
    for record in (good, other):
        assert record["outcome"] == "pass" and record["reward"] == 1.0
        assert {"lint", "types", "runtime"} <= set(record["components"])
    assert bad["outcome"] == "fail" and not {"lint", "types", "runtime"} & set(bad["components"])


@pytest.mark.unit
def test_an_unreadable_tasks_file_is_one_clear_error(tmp_path):
    """A missing file exits with status 2 and names the file."""
    out = whet("judge", str(tmp_path / "nope.jsonl"), str(tmp_path / "samples.jsonl"))
    assert out.returncode == 2 and "nope.jsonl" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.unit
def test_backend_choice_in_every_combination():
    """The flag alone means subprocess; with another --backend it contradicts; without it,
    --backend wins over the config, subprocess from either is refused, unknown names too."""
    from runtime.cli.judge import choose_backend

    assert choose_backend(None, True, "local") == ("subprocess", "")
    assert choose_backend("subprocess", True, "local") == ("subprocess", "")
    assert "contradict" in choose_backend("docker", True, "local")[1]
    assert choose_backend(None, False, "local") == ("local", "")
    assert choose_backend("docker", False, "local") == ("docker", "")
    assert choose_backend("local", False, "subprocess") == ("local", "")
    for asked, configured in (("subprocess", "local"), (None, "subprocess")):
        backend, problem = choose_backend(asked, False, configured)
        assert backend == "" and "--unsafe-subprocess" in problem
    assert "expected local or docker" in choose_backend("runc", False, "local")[1]


FORGER = ("import os\n"
          "for fd in range(3, 64):\n"
          "    for line in (b'{\"k\": \"audit\", \"events\": 5}\\n', b'{\"audit\": 5, \"patched\": 7}\\n',\n"
          "                 b'{\"k\": \"test\", \"id\": [\"x\"], \"status\": {}}\\n'):\n"
          "        try:\n"
          "            os.write(fd, line)\n"
          "        except OSError:\n"
          "            pass\n"
          "def f(xs):\n    return sum(xs)\n")


@pytest.mark.bus
@pytest.mark.usefixtures("built_envs")
def test_an_attempt_that_forges_records_on_every_descriptor_gets_one_verdict(tmp_path):
    """Malformed records written on every descriptor it can reach (the answer pipe, the report
    channel if it can reach it) give that attempt one verdict; the next attempt is judged as
    usual, and `whet judge` exits 0."""
    task = io_task([([[1, 2]], 3)], [([[4]], 4)], "def f(xs):\n    return sum(xs)\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(msgspec.json.encode(task) + b"\n")
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"task_id": "test/f", "completion": c}) + "\n"
                               for c in (FORGER, "def f(xs):\n    return sum(xs)\n")))
    out = whet("judge", str(tasks), str(samples), "--json")
    assert out.returncode == 0, out.stderr
    forged, honest = [json.loads(line) for line in out.stdout.splitlines()]
    assert forged["outcome"] in ("pass", "fail", "hack", "dropped")
    assert (honest["outcome"], honest["reward"]) == ("pass", 1.0)


@pytest.mark.bus
@pytest.mark.usefixtures("built_envs")
def test_a_task_of_an_unknown_kind_is_a_bad_task_and_the_rest_is_judged(tmp_path):
    """`whet judge` drops attempts at a task whose verifier kind is unknown as `infra.bad_task`
    (no reward, not re-run), compiling or not, and judges the other tasks' attempts; it exits 1."""
    good = io_task([([[1, 2]], 3)], [([[4]], 4)], "def f(xs):\n    return sum(xs)\n")
    bad = msgspec.structs.replace(good, task_id="test/g",
                                  verifier=msgspec.structs.replace(good.verifier, kind="python_iox"))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(msgspec.json.encode(good) + b"\n" + msgspec.json.encode(bad) + b"\n")
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"task_id": t, "completion": c}) + "\n" for t, c in (
        ("test/g", "def f(xs):\n    return sum(xs)\n"), ("test/g", "def f(xs) return"),
        ("test/f", "def f(xs):\n    return sum(xs)\n"))))
    out = whet("judge", str(tasks), str(samples), "--json")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["outcome"], r["cause"], r["reward"], r["retries"]) for r in records] == [
        ("dropped", "infra.bad_task", None, 0), ("dropped", "infra.bad_task", None, 0),
        ("pass", "", 1.0, 0)]
    assert "verifier.kind: 'python_iox' is not a known kind" in records[0]["evidence"]
    assert "re-runs 0" in out.stderr and "infra.bad_task 2" in out.stderr
