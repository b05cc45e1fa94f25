"""bench/vs_trl/spread.py: each side's runs of a seed averaged per task, by hand, and every
committed spread.json recomputed from its folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.vs_trl import spread

pytestmark = pytest.mark.unit

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "vs_trl" / "results"


def _clocks(cpu_s: float) -> dict:
    return {"clocks": {"whole_run": {"cpu_s": cpu_s}}}


def _write(folder: Path, name: str, heldout: dict, cpu_s: float = 100.0) -> None:
    (folder / name).write_text(json.dumps({"heldout": heldout, **_clocks(cpu_s)}))


def test_sides_are_averaged_over_their_runs_and_seeds_without_reruns_left_out(tmp_path):
    """Seed 1: whetstone ran twice, TRL once; seed 2 has no rerun and is left out. Each task's
    reward is its mean over a side's runs, a pass counts as its share of the side's runs."""
    first = {"a": [0.1, "fail"], "b": [1.0, "pass"], "c": [0.1, "fail"]}
    again = {"a": [1.0, "pass"], "b": [0.1, "fail"], "c": [0.4, "fail"]}
    trl = {"a": [0.1, "fail"], "b": [1.0, "pass"], "c": [1.0, "pass"]}
    for seed in (1, 2):
        (tmp_path / f"seed-{seed}.json").write_text(json.dumps(
            {"seed": seed, "heldout": {"trl": trl, "whetstone": first},
             "trl": _clocks(400.0), "whetstone": _clocks(150.0)}))
    _write(tmp_path, "whetstone_again-seed-1-samplingseed101.json", again, 250.0)
    got = spread.build(tmp_path)
    assert [s["seed"] for s in got["per_seed"]] == [1]
    one = got["per_seed"][0]
    assert [r["reward"] for r in one["runs"]["whetstone"]] == [0.4, 0.5]
    assert one["rerun_vs_first"]["whetstone"][0]["gained"] == 1
    assert one["rerun_vs_first"]["whetstone"][0]["lost"] == 1
    # whetstone per task (0.55, 0.55, 0.25) against TRL's (0.1, 1.0, 1.0): (0.45 - 0.45 - 0.75) / 3
    assert one["whetstone_vs_trl_over_runs"]["reward_diff"] == -0.25
    assert one["whetstone_vs_trl_over_runs"]["pass_diff"] == -1.0  # (0.5 + 0.5) - 2
    assert got["over_seeds"]["task_unit"]["reward_diff"] == -0.25
    # ids without a rung are their own stratum: a pass share per side, summed over tasks
    assert one["passes_by_stratum"]["a"] == {"tasks": 1, "whetstone": 0.5, "trl": 0.0}
    assert one["passes_by_stratum"]["c"] == {"tasks": 1, "whetstone": 0.0, "trl": 1.0}
    assert "mean" not in got["over_seeds"]["seed_unit"]  # one seed: no interval
    # whetstone's averaged reward 0.45 is below TRL's 0.7: not reached, whatever the CPU
    assert one["reach_over_runs"] == {"reward": {"trl": 0.7, "whetstone": 0.45},
                                      "whole_run_cpu_s": {"trl": 400.0, "whetstone": 200.0},
                                      "reached": False, "ratio": None}
    assert got["over_seeds"]["reach"]["seeds_reached"] == []


def test_a_tagged_variant_stands_alone_for_whetstone_and_is_left_out_untagged(tmp_path):
    """`--tag`: whetstone's side is the variant's runs only (not the seed's first run, which
    is the config's own), TRL's side is unchanged; untagged, the variant's file is left out."""
    first = {"a": [0.1, "fail"], "b": [0.1, "fail"]}
    trl = {"a": [1.0, "pass"], "b": [0.1, "fail"]}
    variant = {"a": [1.0, "pass"], "b": [1.0, "pass"]}
    (tmp_path / "seed-1.json").write_text(json.dumps(
        {"seed": 1, "heldout": {"trl": trl, "whetstone": first},
         "trl": _clocks(400.0), "whetstone": _clocks(150.0)}))
    _write(tmp_path, "whetstone_again-seed-1-samplingseed201-even.json", variant, 100.0)
    got = spread.build(tmp_path, "even")
    assert got["tag"] == "even"
    one = got["per_seed"][0]
    assert [r["run"] for r in one["runs"]["whetstone"]] == [
        "whetstone_again-seed-1-samplingseed201-even.json"]
    assert one["whetstone_vs_trl_over_runs"]["pass_diff"] == 1.0  # 2 passes against 1
    assert one["whetstone_vs_trl_over_runs"]["reward_diff"] == 0.45
    # the variant's 1.0 reaches TRL's 0.55 at its own CPU alone: 100 of TRL's 400
    assert one["reach_over_runs"]["reached"] and one["reach_over_runs"]["ratio"] == 0.25
    assert got["over_seeds"]["reach"]["seeds_reached"] == [1]
    with pytest.raises(FileNotFoundError, match="no seed has a rerun"):
        spread.build(tmp_path)  # the variant is not a rerun of the config
    with pytest.raises(FileNotFoundError, match="samplingseed<m>-other.json"):
        spread.build(tmp_path, "other")


def test_a_folder_without_reruns_is_refused_by_name(tmp_path):
    (tmp_path / "seed-1.json").write_text(json.dumps(
        {"seed": 1, "heldout": {"trl": {"a": [0.1, "fail"]}, "whetstone": {"a": [0.1, "fail"]}},
         "trl": _clocks(400.0), "whetstone": _clocks(150.0)}))
    with pytest.raises(FileNotFoundError, match="no seed has a rerun"):
        spread.build(tmp_path)


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*/spread*.json")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_spread_recomputes_from_its_folder(path):
    got = spread.build(path.parent, json.loads(path.read_text()).get("tag", ""))
    assert {**got, "folder": ""} == {**json.loads(path.read_text()), "folder": ""}


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*/whetstone_again-seed-*.json")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_whetstone_rerun_recomputes_from_its_own_and_its_seed_file(path):
    """whetstone_again.py's figures: its reward and pass rate from its per-task results, on
    the seed's held-out tasks, its first run and TRL's from the seed file it names, trained
    on the list alone, with the seed file's updates."""
    from bench.vs_trl import vs_trl_report as report

    got = json.loads(path.read_text())
    seed = json.loads((RESULTS.parents[2] / got["seed_file"]).read_text())
    assert sorted(got["heldout"]) == sorted(seed["heldout"]["whetstone"])
    assert got["reward"] == report.mean_reward(got["heldout"])
    assert got["pass_rate"] == report.pass_rate(got["heldout"])
    assert got["first_run"]["against"] == report.paired(seed["heldout"]["whetstone"], got["heldout"])
    assert got["trl"]["this_run_against"] == report.paired(seed["heldout"]["trl"], got["heldout"])
    assert got["trained_outside_list"] == [] and got["updates"] == seed["whetstone"]["updates"]
    assert got["sampling_seed"] != seed["seed"]
