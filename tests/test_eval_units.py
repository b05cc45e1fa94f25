"""`whet eval` without a model or a sandbox: bad input is one line and exit 2, the endpoint's
request and answer handling, its errors, and the round's tally and record."""

from __future__ import annotations

import socket

import anyio
import pytest
from typer.testing import CliRunner

from bus.errors import EndpointError
from bus.messages import Task, Verifier
from policy.config import SamplingConfig
from runtime.cli.main import app
from runtime.config import RunConfig
from runtime.evaluate import record
from runtime.evaluate.endpoint import Endpoint, EndpointSampler, answer_of, chat_url, request_body
from runtime.evaluate.round import TaskResult, tally
from tests.support.chat_server import ChatServer

pytestmark = pytest.mark.unit

CONFIG = """
[envs.use.python_functions]
count = 10
gate = false
"""


@pytest.fixture
def paths(tmp_path, monkeypatch):
    """A config, a model folder (files only: nothing loads it), and files that are not."""
    monkeypatch.delenv("WHET_TEST_UNSET_KEY", raising=False)
    (tmp_path / "cfg.toml").write_text(CONFIG)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    (tmp_path / "noweights").mkdir()
    (tmp_path / "noweights" / "config.json").write_text("{}")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.resolved.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "bad.json").write_text('{"format": "whet-eval.v1"}')
    return tmp_path


BAD = [
    ([], "give MODEL_DIR (a model or run folder) or --endpoint URL --model NAME"),
    (["{model}", "--endpoint", "http://127.0.0.1:9", "--model", "m"], ", not both"),
    (["{tmp}/nope"], "nope: no such folder"),
    (["{tmp}/file.txt"], "file.txt: not a folder"),
    (["{tmp}/empty"], "is not a model folder (no config.json), a LoRA adapter folder (adapter_config.json) nor a run folder"),
    (["{tmp}/run"], "has no model/ yet"),
    (["{tmp}/noweights"], "has no weights"),
    (["{model}", "--env", "nope"], "--env 'nope': not an environment of the config (it has python_functions)"),
    (["{model}", "--split", "train"], "--split 'train': expected heldout or validation"),
    (["{model}", "--model", "m"], "--model names an endpoint's model"),
    (["--endpoint", "http://127.0.0.1:9"], "--endpoint needs --model NAME"),
    (["--endpoint", "ftp://host", "--model", "m"], "expected an http(s) URL"),
    (["--endpoint", "http://127.0.0.1:9", "--model", "m", "--api-key-env", "WHET_TEST_UNSET_KEY"],
     "--api-key-env WHET_TEST_UNSET_KEY: the variable is not set"),
    (["{model}", "--baseline", "{tmp}/bad.json"], "not a file 'whet eval --out' wrote"),
    (["{model}", "--baseline", "{tmp}/missing.json"], "missing.json: cannot read it"),
    (["{model}", "--config", "{tmp}/missing.toml"], "missing.toml: cannot read"),
]


@pytest.mark.parametrize("args,expected", BAD, ids=[e for _, e in BAD])
def test_bad_input_is_one_line_and_exit_2(paths, args, expected):
    """Each bad input is refused before any work, with one line naming it, and exit 2."""
    argv = [a.format(tmp=paths, model=paths / "model") for a in args]
    has_config = any(a == "--config" for a in argv)
    result = CliRunner().invoke(app, ["eval", *argv, *([] if has_config else
                                                        ["--config", str(paths / "cfg.toml")])])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("whet: ") and expected in lines[0], lines[0]


def test_the_endpoint_url_may_be_the_root_v1_or_the_full_path():
    """A server root, its /v1 and the full path all give the chat completions URL."""
    for url in ("http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/chat/completions"):
        assert chat_url(url) == "http://h:8000/v1/chat/completions"


def test_the_request_is_greedy_with_the_eval_token_limit():
    """Temperature 0 sends no top_p; stop strings go to the server only when it may drop them."""
    endpoint = Endpoint(url="http://h/v1/chat/completions", model="m")
    kept = SamplingConfig(temperature=0.0, max_new_tokens=7, stop=["\n```\n"], include_stop=True)
    body = request_body(endpoint, kept, "hello")
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hello"}],
                    "temperature": 0.0, "max_tokens": 7}
    dropped = SamplingConfig(temperature=0.5, top_p=0.9, max_new_tokens=7, stop=["END"])
    assert request_body(endpoint, dropped, "hello")["stop"] == ["END"]
    assert request_body(endpoint, dropped, "hello")["top_p"] == 0.9


def test_stop_strings_cut_the_answer_as_the_engine_cuts_it():
    """The first stop string ends the text (kept with include_stop) and the finish is 'stop'."""
    body = {"choices": [{"message": {"content": "```python\nx = 1\n```\nmore\n```\n"},
                         "finish_reason": "length"}]}
    kept = SamplingConfig(stop=["\n```\n"], include_stop=True)
    assert answer_of("u", body, kept) == ("```python\nx = 1\n```\n", "stop")
    assert answer_of("u", body, SamplingConfig(stop=["\n```\n"])) == ("```python\nx = 1", "stop")
    assert answer_of("u", body, SamplingConfig()) == (body["choices"][0]["message"]["content"],
                                                      "length")
    with pytest.raises(EndpointError, match="not a chat completion"):
        answer_of("u", {"error": "overloaded"}, kept)


TASK = Task(task_id="t/1", env="t", env_version="1", domain="d", prompt="say hi",
            verifier=Verifier(kind="python_io"))


def _sample(endpoint: Endpoint):
    return anyio.run(EndpointSampler(endpoint).sample, RunConfig(), [TASK], "u")


def test_an_unreachable_endpoint_is_one_clear_error_after_retries():
    """A port nobody listens on: `EndpointError` naming the URL, after the retries."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = chat_url(f"http://127.0.0.1:{port}")
    with pytest.raises(EndpointError) as raised:
        _sample(Endpoint(url=url, model="m", retries=1))
    text = str(raised.value)
    assert f"endpoint {url} unreachable" in text and "(after 2 tries)" in text
    assert "\n" not in text


def test_a_refusal_is_not_retried_and_says_what_to_check():
    """HTTP 404 (a wrong path or model) stops at the first answer, with a hint."""
    with ChatServer(lambda prompt: "hi") as server:
        with pytest.raises(EndpointError, match="HTTP 404 from .*is this an OpenAI-compatible server"):
            _sample(Endpoint(url=server.url + "/v2/chat", model="m"))
        assert len(server.requests) == 1
        [attempt] = _sample(Endpoint(url=chat_url(server.url), model="m"))
    assert attempt.turns[0].completion == "hi" and attempt.purpose == "eval"
    assert attempt.turns[0].generator == "endpoint:m"


def test_the_tally_pairs_with_a_baseline_and_leaves_dropped_attempts_out(tmp_path):
    """Dropped attempts count nowhere; a task gained and none lost; the record reads back."""
    now = {"a": TaskResult(domain="d", outcome="pass", reward=1.0),
           "b": TaskResult(domain="d", outcome="fail", reward=0.2),
           "c": TaskResult(domain="d", outcome="dropped", reward=None)}
    before = {"a": TaskResult(domain="d", outcome="fail", reward=0.0),
              "b": TaskResult(domain="d", outcome="fail", reward=0.0),
              "c": TaskResult(domain="d", outcome="pass", reward=1.0)}
    cfg = RunConfig()
    result = tally(cfg, now, before)
    d = result.domains["d"]
    assert (d.tasks, d.rate, d.paired, d.gained, d.lost, result.dropped) == (2, 0.5, 2, 1, 0, 1)
    assert result.rewards["d"] == pytest.approx(0.6)
    made = record.make(model={"kind": "folder", "path": "m"}, config="", cfg=cfg,
                       chosen={"d": ["a", "b", "c"]}, results=now, result=result)
    assert made.overall == made.domains["d"]
    assert (made.overall.passed, made.overall.tasks, made.dropped) == (1, 2, 1)
    record.write(tmp_path / "r.json", made)
    back = record.read(tmp_path / "r.json")
    assert back.results == now and back.config_hash == record.config_hash(cfg)
    assert tally(cfg, back.results).domains["d"] == tally(cfg, now).domains["d"]
