"""`whet eval` as a user runs it, on real held-out tasks judged in the real sandbox: a tiny model
folder inside a run folder, and an OpenAI-compatible endpoint (a tiny local server giving a
fixed right or wrong answer per prompt) whose outcomes are judged, counted and paired."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys

import anyio
import pytest

from policy.config import ModelConfig
from policy.model import model_dir
from runtime import config as config_mod
from runtime.evaluate import heldout_tasks
from tests.conftest import ROOT
from tests.support.chat_server import ChatServer
from tests.support.sandbox_fixtures import built_envs  # noqa: F401

pytestmark = [pytest.mark.bus, pytest.mark.usefixtures("built_envs")]

CONFIG = """
[model]
name = "tiny"

[generator.eval_sampling]
temperature = 0.0
max_new_tokens = 16
stop = ["\\n```\\n"]
include_stop = true

[envs]
mix = { python = 1.0 }

[envs.use.python_functions]
count = 20
heldout_share = 0.5
gate = false

[evaluator]
tasks_per_domain = 4

[executor]
concurrency = 2
"""


def whet(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-m", "runtime.cli", "eval", *args], cwd=ROOT,
                          env=environ, text=True, capture_output=True, timeout=280)


def printed(stdout: str, row: str) -> list[str]:
    """The fields of the table row named `row`."""
    [line] = [line for line in stdout.splitlines() if line.split()[:1] == [row]]
    return re.sub(r"[\[\],]", " ", line).split()


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "cfg.toml"
    path.write_text(CONFIG)
    return path


def test_a_run_folder_is_evaluated_and_the_file_agrees_with_what_is_printed(tmp_path, config):
    """A run folder's model/ on two held-out tasks: the JSON names the tasks and each one's
    result, and the printed k/n and mean reward are those results counted."""
    run = tmp_path / "run"
    shutil.copytree(model_dir(ModelConfig(name="tiny")), run / "model")
    out = tmp_path / "eval.json"
    done = whet(str(run), "--config", str(config), "--per-domain", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    made = json.loads(out.read_text())
    assert made["format"] == "whet-eval.v1" and re.fullmatch(r"[0-9a-f]{64}", made["config_hash"])
    assert made["model"] == {"kind": "folder", "path": str(run / "model")}
    assert made["split"] == "heldout" and list(made["tasks"]) == ["python"]
    ids = made["tasks"]["python"]
    assert len(ids) == 2 and set(made["results"]) == set(ids)
    results = list(made["results"].values())
    assert all(r["domain"] == "python" and r["outcome"] in ("pass", "fail", "dropped")
               for r in results)
    counted = [r for r in results if r["outcome"] != "dropped"]
    passed = sum(r["outcome"] == "pass" for r in counted)
    reward = sum(r["reward"] for r in counted) / len(counted)
    for row in ("python", "all"):
        fields = printed(done.stdout, row)
        assert fields[1] == f"{passed}/{len(counted)}" and float(fields[-1]) == round(reward, 3)
    assert made["overall"]["passed"] == passed and made["overall"]["tasks"] == len(counted)
    assert made["overall"]["reward"] == pytest.approx(reward)


def _answers(cfg_path, right: int):
    """prompt -> answer: the reference for the first `right` tasks in id order, wrong code for
    the rest; each right answer runs on past its stop string into a second, failing block."""
    chosen = anyio.run(heldout_tasks, config_mod.load(cfg_path))
    tasks = sorted(chosen["python"], key=lambda t: t.task_id)
    good = {t.prompt: f"```python\n{t.verifier.reference}```\nCheck:\n```python\nassert False\n```\n"
            for t in tasks[:right]}
    return tasks, lambda prompt: good.get(prompt, "```python\ndef nothing():\n    return None\n```\n")


def test_an_endpoint_is_judged_counted_and_paired_with_a_baseline(tmp_path, config):
    """Right answers pass and wrong ones fail, as judged; the request is the eval sampling's,
    with the key; a better second endpoint gains exactly the tasks the first got wrong."""
    tasks, first = _answers(config, right=2)
    ids = [t.task_id for t in tasks]
    out = tmp_path / "first.json"
    with ChatServer(first) as server:
        done = whet("--endpoint", server.url, "--model", "fake-model", "--api-key-env",
                    "WHET_TEST_KEY", "--config", str(config), "--out", str(out),
                    WHET_TEST_KEY="sekrit")
    assert done.returncode == 0, done.stderr[-3000:]
    made = json.loads(out.read_text())
    assert made["model"]["kind"] == "endpoint" and made["model"]["name"] == "fake-model"
    assert {t: r["outcome"] for t, r in made["results"].items()} == \
        {t: "pass" if i < 2 else "fail" for i, t in enumerate(ids)}
    assert printed(done.stdout, "all")[1] == "2/4"
    assert len(server.requests) == 4
    for headers, body in server.requests:
        assert headers["Authorization"] == "Bearer sekrit"
        assert body["model"] == "fake-model" and body["temperature"] == 0.0
        assert body["max_tokens"] == 16 and "stop" not in body  # include_stop: cut here

    _, better = _answers(config, right=4)
    with ChatServer(better) as server:
        done = whet("--endpoint", server.url + "/v1", "--model", "fake-model", "--config",
                    str(config), "--baseline", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    scores, paired = done.stdout.split("\nagainst ", 1)
    assert printed(scores, "all")[1] == "4/4"
    assert printed(paired, "all")[1:5] == ["4", "2", "0", "0.5"]


def test_an_unreachable_endpoint_stops_the_round_with_one_clear_line(tmp_path, config):
    """Nobody listens: exit 2 and one line naming the URL, after the retries; no file."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "never.json"
    done = whet("--endpoint", f"http://127.0.0.1:{port}", "--model", "m", "--config", str(config),
                "--out", str(out))
    assert done.returncode == 2 and not out.exists()
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"whet: endpoint http://127.0.0.1:{port}/v1/chat/completions unreachable")
