"""`whet eval` on a tool domain: repository episodes played by a model folder in real
sandbox sessions, their turns sampled in batches, the final workspaces judged and counted."""

from __future__ import annotations

import json

import anyio
import msgspec
import pytest

from envs.environment import generate
from envs.repository import ENVIRONMENT
from policy.config import ModelConfig
from policy.model import model_dir
from runtime import config as config_mod
from runtime.evaluate.episodes import TurnBatch, run_episodes
from tests.conftest import ROOT
from tests.support.sandbox_fixtures import built_envs  # noqa: F401
from tests.test_eval_cli import printed, whet


CONFIG = f"""
extends = "{ROOT}/configs/repository.toml"

[model]
name = "tiny"

[generator.eval_sampling]
temperature = 0.0
max_new_tokens = 16
stop = ["</tool_call>"]

[envs.use.repository]
count = 20
heldout_share = 0.5
gate = false

[executor]
concurrency = 2
"""


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "cfg.toml"
    path.write_text(CONFIG)
    return path


@pytest.mark.bus
@pytest.mark.usefixtures("built_envs")
def test_whet_eval_plays_repository_episodes_and_reports_their_figures(tmp_path, config):
    """Two held-out repository tasks, two turns each: judged and counted, and the turns, the
    well-formed share, calls and ends printed and kept per task in --out."""
    out = tmp_path / "eval.json"
    done = whet(str(model_dir(ModelConfig(name="tiny"))), "--config", str(config),
                "--env", "repository", "--limit", "2", "--max-turns", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert printed(done.stdout, "repository")[1] == "0/2"
    assert "repository: 2 episodes, 4 turns, well-formed tool calls 0/4 (0.000)" in done.stdout
    record = json.loads(out.read_text())
    results = record["results"]
    assert len(results) == 2 and all(r["turns"] == 2 and r["end"] == "turns" for r in results.values())
    assert all(r["outcome"] in ("pass", "fail") and r["reward"] is not None for r in results.values())
    assert record["episodes"]["repository"]["ends"] == {"turns": 2}


@pytest.mark.bus
@pytest.mark.usefixtures("built_envs")
def test_an_endpoint_refuses_a_tool_domain_in_one_line(config):
    """--endpoint serves single-turn tasks only: a tool domain is one clear line, exit 2."""
    done = whet("--endpoint", "http://127.0.0.1:9", "--model", "m", "--config", str(config),
                "--env", "repository", "--limit", "1")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "single-turn tasks only; repository runs tool episodes" in done.stderr


@pytest.mark.bus
@pytest.mark.usefixtures("built_envs")
async def test_concurrent_episodes_share_batches_in_real_sessions(config):
    """Three tiny-model episodes of two turns: each round of turns is one batch of three rows,
    each second turn continues from its first turn's prefix cache, each malformed turn is
    answered at once, and each final workspace comes back."""
    from policy.torch_engine import TorchEngine

    cfg = config_mod.load(config)
    tasks = list(generate(ENVIRONMENT, 3, seed=5))
    engine = TorchEngine(cfg.generator, cfg.model, 0)
    batch = TurnBatch(engine, cfg.generator.max_batch)
    with anyio.fail_after(120):
        episodes = await run_episodes(cfg, engine, tasks, "t", max_turns=2, batch=batch)
    assert batch.batches == [3, 3]
    assert engine.prefixes.stats.hits == 3  # the second turns start from the first turns' keys
    assert [e.end for e in episodes] == ["turns"] * 3
    for episode, task in zip(episodes, tasks):
        first, second = episode.attempt.turns
        assert second.feedback and first.feedback.startswith("error: ")  # no call from tiny
        assert set(task.files) <= set(episode.attempt.workspace)


@pytest.mark.unit
def test_limit_caps_every_domain_and_episode_figures_sum_by_domain():
    """--limit N caps tasks_per_domain and each domain_tasks entry at N; a domain's episode
    figures are its tasks' turns, well-formed calls, calls by tool and ends summed."""
    from runtime.cli.eval import narrowed
    from runtime.config import RunConfig
    from runtime.evaluate.record import episode_scores
    from runtime.evaluate.round import TaskResult

    cfg = RunConfig()
    cfg = msgspec.structs.replace(cfg, evaluator=msgspec.structs.replace(
        cfg.evaluator, tasks_per_domain=40, domain_tasks={"humaneval": 10, "python": 3}))
    ev = narrowed(cfg, [], None, None, limit=5).evaluator
    assert ev.tasks_per_domain == 5 and ev.domain_tasks == {"humaneval": 5, "python": 3}
    results = {
        "a": TaskResult(domain="repository", outcome="fail", reward=0.1, turns=4, well_formed=3,
                        tools={"read_file": 2, "submit": 1}, end="submit"),
        "b": TaskResult(domain="repository", outcome="pass", reward=1.0, turns=6, well_formed=0,
                        end="steps"),
        "c": TaskResult(domain="python", outcome="pass", reward=1.0)}
    [(domain, score)] = episode_scores(results).items()
    assert domain == "repository" and (score.episodes, score.turns, score.well_formed) == (2, 10, 3)
    assert score.share == 0.3 and score.tools == {"read_file": 2, "submit": 1}
    assert score.ends == {"steps": 1, "submit": 1}
