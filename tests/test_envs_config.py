"""The task side's config sections: bad values name the file, key and expectation."""

from __future__ import annotations

import msgspec
import pytest

from bus.errors import ConfigError
from envs.config import EpisodeBudgets
from runtime.config import load

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text, key, expectation", [
    ("[sampler]\nband_low = 0.9\nband_high = 0.5\n", "sampler", "band_low must be below band_high"),
    ("[sampler]\nladder_offsets = [0, 1]\nladder_weights = [1.0]\n", "sampler", "same length"),
    ("[sampler]\nreplay_share = 1.5\n", "sampler.replay_share", "<= 1.0"),
    ("[envs.use.python_functions]\ncount = -1\n", "envs.use.<key>.count", ">= 0"),
    ("[envs.use.python_functions]\nchecks = ['vibes']\n", "envs.use.<key>.checks.0", "expected one of ['determinism', 'mutation']"),
    ("[envs.use.repository]\nbudgets = { max_stepz = 3 }\n", "envs.use.<key>.budgets.max_stepz", "unknown key"),
    ("[envs.use.repository]\nbudgets = { max_steps = 0 }\n", "envs.use.<key>.budgets.max_steps", ">= 1"),
    ("[envs.gates]\nmin_kill_rate = 2\n", "envs.gates.min_kill_rate", "<= 1.0"),
    ("[evaluator]\nevery_versions = 0\n", "evaluator.every_versions", ">= 1"),
    ("[evaluator]\nsamples_per_task = 4\n", "generator.eval_sampling.temperature",
     "samples_per_task = 4 needs a temperature above 0"),
])
def test_bad_task_side_values_are_named(tmp_path, text, key, expectation):
    """Each mistake names the file, the key and what was expected."""
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert err.value.key == key and expectation in err.value.problem, str(err.value)
    assert str(path) in str(err.value)


def test_k_samples_per_held_out_task_take_the_eval_sampling_temperature(tmp_path):
    """samples_per_task = 4 with eval sampling at temperature 0.8 loads."""
    path = tmp_path / "k.toml"
    path.write_text("[evaluator]\nsamples_per_task = 4\n[generator.eval_sampling]\ntemperature = 0.8\n")
    cfg = load(path)
    assert (cfg.evaluator.samples_per_task, cfg.generator.eval_sampling.temperature) == (4, 0.8)


def test_episode_budgets_from_config_replace_the_environments_and_keep_ids_and_splits(tmp_path):
    """`budgets` sets the tool episode's budgets the judge and the session read; unset ones
    stay the environment's; the tasks' ids and splits are those made without it."""
    from envs.registry import entry_tasks
    from envs.repository import BUDGETS

    path = tmp_path / "b.toml"
    path.write_text("[envs.use.repository]\ncount = 6\nheldout_share = 0.5\n"
                    "budgets = { max_steps = 5, result_chars = 900 }\n")
    entry = load(path).envs.use["repository"]
    tasks = entry_tasks("repository", entry).tasks
    plain = entry_tasks("repository", msgspec.structs.replace(entry, budgets=EpisodeBudgets())).tasks
    assert [(t.task_id, t.split) for t in tasks] == [(t.task_id, t.split) for t in plain]
    assert {t.split for t in tasks} == {"heldout", "train"}
    for t, p in zip(tasks, plain):
        assert (t.verifier.budget("max_steps", 0), t.verifier.budget("result_chars", 0)) == (5, 900)
        assert t.verifier.budget("max_tokens", 0) == int(BUDGETS["max_tokens"])
        assert p.verifier.budget("max_steps", 0) == int(BUDGETS["max_steps"])
        rest = [{k: v for k, v in x.verifier.extra.items() if k not in BUDGETS} for x in (t, p)]
        assert rest[0] == rest[1] and rest[0]
