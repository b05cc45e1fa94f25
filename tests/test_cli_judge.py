"""`whet judge` as a user runs it: task file, samples file, one verdict per attempt."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec

from envs.humaneval import wheel_path
from tests.judging_support import io_task

ROOT = Path(__file__).resolve().parent.parent


def whet(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], cwd=ROOT, env=env,
                          text=True, capture_output=True, timeout=300)


def test_judging_a_humaneval_samples_file_prints_one_verdict_per_attempt(tmp_path):
    """Good samples are judged, bad lines are named on stderr, and JSON output parses."""
    rows = [json.loads(line) for line in gzip.open(wheel_path(), "rt")][:3]
    tasks = tmp_path / "HumanEval.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"task_id": r["task_id"], "completion": r["canonical_solution"]}) + "\n"
                               for r in rows)
                       + json.dumps({"task_id": "HumanEval/0", "completion": "    return 1 / 0\n"}) + "\n"
                       + "{broken\n" + json.dumps({"task_id": "HumanEval/99", "completion": ""}) + "\n")
    text = whet("judge", str(tasks), str(samples))
    assert text.returncode == 0, text.stderr
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


def test_an_unreadable_tasks_file_is_one_clear_error(tmp_path):
    """A missing file exits with status 2 and names the file."""
    out = whet("judge", str(tmp_path / "nope.jsonl"), str(tmp_path / "samples.jsonl"))
    assert out.returncode == 2 and "nope.jsonl" in out.stderr and "Traceback" not in out.stderr
