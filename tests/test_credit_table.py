"""Unit tests of the credit table's code (bench/repository/credit_table.py) on small
fabricated per-task result files: no variant is run here."""

from __future__ import annotations

import json

import pytest

from bench.repository import credit_table

pytestmark = pytest.mark.unit


def result(tmp_path, variant: str, v0: list[bool], v8: list[bool], run_dir: str = "runs/x") -> None:
    """A result file as ablation.run_variant writes it, for tasks t0..tn."""
    def tasks(passes):
        return {f"repository/t{i}": {"outcome": "pass" if p else "fail", "reward": float(p)}
                for i, p in enumerate(passes)}
    (tmp_path / f"{variant}-s0.json").write_text(json.dumps({
        "variant": variant, "seed": 0, "samples_trained": 128, "cpu_s": 100.0, "run_dir": run_dir,
        "tasks": {"0": tasks(v0), "8": tasks(v8)}, "rounds": {}}))


def test_a_variant_that_gains_significantly_becomes_the_default_and_the_table_shows_intervals(tmp_path):
    """step gains 10 tasks and loses none against the default (p = 0.002): the default
    follows it; no_repair's one gained task is not enough; each row has its interval."""
    base = [False] * 12 + [True] * 8
    result(tmp_path, "default", [False] * 20, base)
    result(tmp_path, "step", [False] * 20, [True] * 10 + [False] * 2 + [True] * 8)
    result(tmp_path, "no_repair", [False] * 20, [True] + base[1:])
    text = credit_table.ablation_table.table(tmp_path, 8).split("\n\n")[0]  # the first table
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "0.400 (" in rows["default"] and "0.900 (" in rows["step"]
    assert "+0.500 (+10/-0, p=0.002)" in rows["step"]
    assert "| 0.900 | +0.500 (+0.275, +0.725) |" in rows["step"]  # reward: 1 a pass here
    assert credit_table.choice(tmp_path, 8).startswith(
        'default follows step ({"learner": {"credit": "step"}}): +0.500 (+10/-0, p=0.002)')


def test_without_a_significant_gain_the_default_stays(tmp_path):
    """Gains that a sign test cannot tell from chance, or losses, leave the default as it is."""
    result(tmp_path, "default", [False] * 10, [True] * 5 + [False] * 5)
    result(tmp_path, "step", [False] * 10, [True] * 7 + [False] * 3)
    result(tmp_path, "no_repair", [False] * 10, [False] * 10)
    assert credit_table.choice(tmp_path, 8).startswith("default stays")


def test_variants_start_from_the_defaults_warm_started_model_and_share_its_version_0(tmp_path, monkeypatch):
    """Once the default's run left a warm-started model, another variant trains from it with no
    warm start of its own and takes the default's version-0 round; before that, its own."""
    monkeypatch.setattr(credit_table, "ROOT", tmp_path)
    over, shared = credit_table.overrides_of("step", 0, 8, 60, tmp_path)
    assert "warmstart" not in over and shared is None
    (tmp_path / "runs" / "x" / "warmstart" / "model").mkdir(parents=True)
    result(tmp_path, "default", [False] * 4, [True] * 4)
    over, shared = credit_table.overrides_of("step", 0, 8, 60, tmp_path)
    assert over["warmstart"] == {"enabled": False}
    assert over["model"]["path"] == str(tmp_path / "runs" / "x" / "warmstart" / "model")
    assert over["learner"] == {"credit": "step"} and over["evaluator"]["initial_round"] is False
    assert shared == tmp_path / "default-s0.json"
    assert credit_table.overrides_of("default", 0, 8, 60, tmp_path)[1] is None


def test_the_ablation_table_sets_a_warm_start_alone_against_its_base_at_both_rounds(tmp_path):
    """A variant whose results carry the warm start's record gets a line on its version 0
    against the base's version 0 and last round, with each side's CPU seconds."""
    result(tmp_path, "default", [False] * 10, [True] * 3 + [False] * 7)
    result(tmp_path, "warmstart", [True] * 6 + [False] * 4, [True] * 7 + [False] * 3)
    path = tmp_path / "warmstart-s0.json"
    path.write_text(json.dumps({**json.loads(path.read_text()),
                                "warmstart": {"cpu_s": 40.0, "demos": 120}}))
    text = credit_table.ablation_table.table(tmp_path, 8)
    [line] = [line for line in text.splitlines() if line.startswith("warmstart: ")]
    assert "(its v0; 40 CPU-s" in line and "against default at v0: +0.600 (+6/-0, p=0.031)" in line
    assert "against default at v8 (100 CPU-s for the whole run): +0.300 (+3/-0, p=0.250)" in line
    result(tmp_path, "warmstart", [True] * 10, [True] * 10)  # no record: no line
    assert "warmstart: " not in credit_table.ablation_table.table(tmp_path, 8)


def test_the_ablation_table_gives_each_runs_passes_per_domain_and_rung(tmp_path):
    """The second table: per run, passes at v0 and at the last round for each domain and
    rung read from the task ids, so a run stuck at nothing in one stratum shows."""
    def write(variant, seed, v0, v8):
        def tasks(passes):
            return {f"{d}/v1-L{r}-{i}": {"outcome": "pass" if p else "fail", "reward": float(p)}
                    for (d, r, i), p in passes.items()}
        (tmp_path / f"{variant}-s{seed}.json").write_text(json.dumps({
            "variant": variant, "seed": seed, "samples_trained": 1, "cpu_s": 1.0,
            "tasks": {"0": tasks(v0), "8": tasks(v8)}, "rounds": {}}))
    ids = [("data", 0, "a"), ("data", 0, "b"), ("data", 1, "c"), ("json", 0, "d")]
    write("default", 0, dict.fromkeys(ids, False), {ids[0]: True, ids[1]: True, ids[2]: False,
                                                     ids[3]: True})
    write("default", 1, {ids[0]: True, **dict.fromkeys(ids[1:], False)},
          dict.fromkeys(ids, False))
    text = credit_table.ablation_table.table(tmp_path, 8)
    assert "| variant | seed | data L0 | data L1 | json L0 |" in text
    assert "| default | 0 | 0 -> 2 of 2 | 0 -> 0 of 1 | 0 -> 1 of 1 |" in text
    assert "| default | 1 | 1 -> 0 of 2 | 0 -> 0 of 1 | 0 -> 0 of 1 |" in text
