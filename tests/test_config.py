"""Config files: every shipped file loads; a bad one names the file, the key and what was
expected; `extends` merges; the environment overrides the URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.errors import ConfigError
from runtime.config import RunConfig, dump, load

pytestmark = pytest.mark.unit

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    """Each file in configs/ parses and validates."""
    assert isinstance(load(path), RunConfig)


def test_configs_folder_is_not_empty():
    """The parametrized test above really ran over something."""
    assert any(p.name == "default.toml" for p in CONFIGS)


@pytest.mark.parametrize("text, key, expectation", [
    ("[bus]\nack_wait_s = -1\n", "bus.ack_wait_s", "> 0"),
    ("[bus]\nack_wait = 3\n", "bus.ack_wait", "unknown key"),
    ("[supervisor]\ndrain_s = 'soon'\n", "supervisor.drain_s", "Expected `float`"),
    ("[actors.count]\nnosuchkind = 1\n", "actors.count.nosuchkind", "unknown actor kind"),
    ("[actors.count]\nprobe = 'x'\n", "actors.count.<key>", "Expected `int`"),
    ("[actors.target]\nmine = 'no_colon'\n", "actors.target.mine", "module:function"),
    ("[training]\nmode = 'sometimes'\n", "training.mode", "sync"),
    ("[learner]\nloss_divisor = 'dapo'\n", "learner.loss_divisor", "batch_tokens"),
    ("[training]\nzero_signal = 'skip'\n", "training.zero_signal", "refill"),
    ("[training]\nrefill_limit = 0\n", "training.refill_limit", ">= 1"),
    ("[bus]\nsync_interval = 'sometimes'\n", "bus.sync_interval", "'always' or a duration"),
    ("[bus]\nsync_interval = '2 minutes'\n", "bus.sync_interval", "'always' or a duration"),
    ("[bus]\nsync_interval = '0s'\n", "bus.sync_interval", "above 0"),
    ("[actors.count]\nlearner_rank = 1\n", "actors.count.learner_rank", 'ranks = "bus"'),
    ("[learner]\nranks = 'bus'\nworld_size = 3\n[actors.count]\nlearner_rank = 1\n",
     "actors.count.learner_rank", "world_size = 3 needs 2"),
])
def test_bad_values_name_file_key_and_expectation(tmp_path, text, key, expectation):
    """The error message says which file, which key, and what was expected."""
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert err.value.source == str(path)
    assert err.value.key == key
    assert expectation in str(err.value)


def test_broken_toml_names_the_file_and_position(tmp_path):
    """A syntax error points at the line."""
    path = tmp_path / "broken.toml"
    path.write_text("[bus\nurl = 1\n")
    with pytest.raises(ConfigError, match=r"broken\.toml: not valid TOML: .*line 1"):
        load(path)


def test_extends_merges_tables_key_by_key(tmp_path):
    """A file extending another overrides only the keys it sets."""
    (tmp_path / "base.toml").write_text("[bus]\nack_wait_s = 7\nmax_deliver = 9\n")
    (tmp_path / "child.toml").write_text('extends = "base.toml"\n[bus]\nack_wait_s = 3\n')
    cfg = load(tmp_path / "child.toml")
    assert (cfg.bus.ack_wait_s, cfg.bus.max_deliver) == (3, 9)


def test_extends_loop_is_an_error(tmp_path):
    """Two files extending each other fail clearly instead of recursing."""
    (tmp_path / "a.toml").write_text('extends = "b.toml"\n')
    (tmp_path / "b.toml").write_text('extends = "a.toml"\n')
    with pytest.raises(ConfigError, match="loop"):
        load(tmp_path / "a.toml")


def test_resolved_dump_loads_back_identically(tmp_path):
    """The resolved config written at start is itself a loadable config."""
    cfg = load(CONFIGS[0])
    out = tmp_path / "config.resolved.json"
    out.write_bytes(dump(cfg))
    assert load(out) == cfg


def test_environment_url_overrides_config(tmp_path, monkeypatch):
    """WHET_NATS_URL wins over the file's bus.url."""
    path = tmp_path / "c.toml"
    path.write_text('[bus]\nurl = "nats://file:1"\n')
    monkeypatch.setenv("WHET_NATS_URL", "nats://env:2")
    assert load(path).bus.url == "nats://env:2"


def test_the_agentic_jobs_rounds_hold_100_held_out_repository_tasks_over_every_rung():
    """configs/agentic.toml with its real task generation (no gates, no model): the evaluator's
    stratified choice has 100 held-out repository tasks, each rung about a third of them in
    proportion to the split, slack in the split for gate rejections, 60 validation tasks for
    the credit table, and the episode budgets on every task."""
    from collections import Counter

    from envs.evaluation import pick_heldout
    from envs.intake import collect
    from envs.strata import rung_of

    cfg = load(Path(__file__).parent.parent / "configs" / "agentic.toml")
    assert cfg.warmstart.enabled and cfg.envs.mix.get("repository") == 1.0
    heldout = [t for t, _ in collect(cfg.envs, seed=cfg.run.seed, split="heldout")[0]]
    assert {t.domain for t in heldout} == {"repository"} and len(heldout) >= 120
    chosen = pick_heldout(heldout, cfg.evaluator.tasks_per_domain, "heldout")["repository"]
    assert len(chosen) >= 100
    rungs, split = Counter(map(rung_of, chosen)), Counter(map(rung_of, heldout))
    assert sorted(rungs) == [0, 1, 2] and min(rungs.values()) >= 25, rungs
    for rung, n in rungs.items():  # largest remainder: within one seat of the split's share
        assert abs(n - len(chosen) * split[rung] / len(heldout)) < 1.0, (rungs, split)
    validation = [t for t, _ in collect(cfg.envs, seed=cfg.run.seed, split="validation")[0]]
    assert len(pick_heldout(validation, 60, "validation")["repository"]) == 60
    assert {(t.verifier.budget("max_steps", 0), t.verifier.budget("result_chars", 0))
            for t in heldout + validation} == {(12, 1200)}
