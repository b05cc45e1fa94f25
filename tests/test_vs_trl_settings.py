"""bench/vs_trl's TRL side takes whetstone's settings: its GRPOConfig makes the same
optimizer steps per generated batch as whetstone's learner (`learner.minibatches`)."""

from __future__ import annotations

import pytest

from bench.vs_trl.vs_trl_grpo import grpo_settings
from policy.config import LearnerConfig
from runtime.config import RunConfig, TrainingConfig

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("minibatches", [1, 2])
def test_trl_takes_as_many_optimizer_steps_per_generated_batch(tmp_path, minibatches):
    from trl import GRPOConfig

    cfg = RunConfig(training=TrainingConfig(batch_size=32, group_size=8, max_steps=8),
                    learner=LearnerConfig(micro_batch_size=8, minibatches=minibatches))
    trl = GRPOConfig(**grpo_settings(cfg, bf16=False, out_dir=str(tmp_path)))
    # One generation of 32 samples feeds `minibatches` optimizer steps; 8 generations in all.
    assert trl.generation_batch_size == 32
    per_step = trl.per_device_train_batch_size * trl.gradient_accumulation_steps
    assert 32 // per_step == minibatches and trl.max_steps * per_step == 8 * 32


def test_a_batch_that_does_not_split_into_its_minibatches_is_refused(tmp_path):
    cfg = RunConfig(training=TrainingConfig(batch_size=24, group_size=8),
                    learner=LearnerConfig(micro_batch_size=8, minibatches=2))
    with pytest.raises(ValueError, match="minibatches 2"):
        grpo_settings(cfg, bf16=False, out_dir=str(tmp_path))


def test_trl_rows_hold_the_mix_exactly_and_cycle_each_domain_s_shuffled_tasks():
    """Every batch of four groups is two tasks of each domain (mix 0.5/0.5, as whetstone's
    sampler draws domains); a domain's tasks come each once before any repeats."""
    from types import SimpleNamespace

    from bench.vs_trl.vs_trl_grpo import draw_order

    tasks = {d: [SimpleNamespace(task_id=f"{d}/{i}") for i in range(n)]
             for d, n in (("data", 5), ("structured", 7))}
    drawn = draw_order(tasks, {"data": 0.5, "structured": 0.5}, 32, seed=3)
    for start in range(0, 32, 4):
        assert sorted(d for d, _ in drawn[start:start + 4]) == ["data"] * 2 + ["structured"] * 2
    data = [t.task_id for d, t in drawn if d == "data"]
    assert sorted(data[:5]) == [f"data/{i}" for i in range(5)] and data[5:10] == data[:5]


def test_trl_s_own_seed_replaces_the_run_s_only_when_given(tmp_path):
    """`trl_one_step.py --trl-seed` runs TRL again on a seed's list with another seed of its
    own; without it the trainer takes the run's seed, as vs_trl.py's seeds do."""
    from runtime.sections import RunSection

    cfg = RunConfig(run=RunSection(seed=3), training=TrainingConfig(batch_size=32, group_size=8))
    assert grpo_settings(cfg, bf16=False, out_dir=str(tmp_path))["seed"] == 3
    assert grpo_settings(cfg, bf16=False, out_dir=str(tmp_path), seed=11)["seed"] == 11


def test_whetstone_again_changes_only_the_sampling_seed_and_where_runs_go(tmp_path):
    """`whetstone_again.py --sampling-seed` runs whetstone again on a seed's config: its draws
    and sampling take the new seed; `[run] seed` (the tasks generated, the held-out pick), the
    task list and every other setting stay the seed's, so the listed ids are still training
    tasks of the config."""
    import json

    from bench.vs_trl import vs_trl
    from bench.vs_trl.whetstone_again import reseeded
    from envs.intake import collect
    from runtime.config import dump, load

    seed_dir = tmp_path / "seed-1"
    seed_dir.mkdir()
    cfg = vs_trl.seed_config(vs_trl.PROTOCOLS["short_lean_mb2"], 1, seed_dir / "runs")
    tasks, _ = collect(cfg.envs, seed=1, split="train")
    ids = seed_dir / "train_ids.txt"
    ids.write_text("\n".join(t.task_id for t, _ in tasks[:5]) + "\n")
    (seed_dir / "config.json").write_bytes(dump(vs_trl.restricted(cfg, ids)))
    work = seed_dir / "whetstone_sampling101"
    work.mkdir()
    again = reseeded(seed_dir / "config.json", 101, work / "runs")
    before, after = json.loads((seed_dir / "config.json").read_text()), json.loads(again.read_text())
    assert after["run"] == {**before["run"], "sampling_seed": 101, "runs_dir": str(work / "runs")}
    assert {k: v for k, v in after.items() if k != "run"} == \
        {k: v for k, v in before.items() if k != "run"}
    loaded = load(again)
    assert (loaded.run.seed, loaded.run.draw_seed) == (1, 101)
    kept, errors = collect(loaded.envs, seed=loaded.run.seed, split="train")
    assert not errors and [t.task_id for t, _ in kept] == [t.task_id for t, _ in tasks[:5]]


def test_whetstone_again_set_changes_the_named_setting_and_refuses_an_unknown_one(tmp_path):
    """`--set section.key=JSON` changes that setting of the seed's config and nothing else; a
    key the config lacks, or a value that is not JSON, is refused by name; `--set` without
    `--tag` is refused (its runs must not pass for the config's own)."""
    import argparse
    import json

    from bench.vs_trl.whetstone_again import parse, reseeded, setting
    from runtime.config import RunConfig, dump, load

    (tmp_path / "config.json").write_bytes(dump(RunConfig()))
    (tmp_path / "work").mkdir()
    change = setting("sampler.ladder_weights=[0.1, 0.2, 0.5, 0.5]")
    again = reseeded(tmp_path / "config.json", 7, tmp_path / "work" / "runs", [change])
    before = json.loads((tmp_path / "config.json").read_text())
    after = json.loads(again.read_text())
    assert load(again).sampler.ladder_weights == [0.1, 0.2, 0.5, 0.5]
    before["sampler"]["ladder_weights"] = after["sampler"]["ladder_weights"]
    assert {k: v for k, v in after.items() if k != "run"} == \
        {k: v for k, v in before.items() if k != "run"}
    with pytest.raises(KeyError, match="sampler.ladder_wieghts"):
        reseeded(tmp_path / "config.json", 7, tmp_path / "work" / "runs",
                 [setting("sampler.ladder_wieghts=[1]")])
    with pytest.raises(KeyError, match="samplr.ladder_weights"):
        reseeded(tmp_path / "config.json", 7, tmp_path / "work" / "runs",
                 [setting("samplr.ladder_weights=[1]")])
    with pytest.raises(argparse.ArgumentTypeError, match="not JSON"):
        setting("sampler.ladder_weights=[0.1,")
    with pytest.raises(SystemExit):
        parse(["--seed-dir", "d", "--seed-file", "f", "--sampling-seed", "1", "--out", "o",
               "--set", "sampler.replay_share=0.2"])
