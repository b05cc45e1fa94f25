"""Intake gates, run for real through the judge's check_code on the subprocess sandbox."""

from __future__ import annotations

import json

import anyio
import msgspec
import pytest

from bus.messages import Task, Verifier
from envs import registry, taskfile
from envs.config import EnvEntry, EnvsConfig, GateConfig
from envs.environment import generate
from envs.evaluation import pick_heldout
from envs.gates import gate_task, mutation_verdict
from envs.intake import collect, gated_heldout
from envs.strata import stratum_of, strata
from sandbox import open_backend
from sandbox.config import SandboxConfig

GATES = GateConfig()


async def _gate(task: Task, gates: GateConfig = GATES):
    backend = await open_backend(SandboxConfig())
    try:
        return await gate_task(task, backend, gates, anyio.CapacityLimiter(2))
    finally:
        await backend.aclose()


def _tasks(name: str, levels: list[int]) -> list[Task]:
    env = registry.resolve(name, EnvEntry())
    return list(generate(env, len(levels), seed=11, levels=levels))


@pytest.mark.bus
@pytest.mark.parametrize("name,levels", [("python_functions", [0, 2, 4]),
                                         ("data_scripts", [0, 3]),
                                         ("structured_output", [0, 1, 2, 3, 4])])
async def test_generated_tasks_pass_every_gate(name, levels):
    """Generated tasks of each domain are solvable, deterministic and have strong tests."""
    for task in _tasks(name, levels):
        report = await _gate(task)
        assert report.accepted, (task.task_id, report.reasons, report.detail)
        assert report.mutants >= 1 and report.kill_rate >= GATES.min_kill_rate


def _grade_task(scores: list[int]) -> Task:
    reference = ("def grade(score):\n    if score >= 90:\n        return 'A'\n"
                 "    if score >= 80:\n        return 'B'\n    return 'C'\n")
    scope: dict = {}
    exec(reference, scope)
    cases = [{"args": [s], "expected": scope["grade"](s)} for s in scores]
    return Task(task_id="test/grade", env="test", env_version="1", domain="python",
                prompt="Write grade(score).", entry_point="grade",
                verifier=Verifier(kind="python_io", visible=json.dumps(cases[:1]),
                                  hidden=json.dumps(cases[1:]), reference=reference,
                                  extra={"random_cases": "0"}))


@pytest.mark.bus
async def test_weak_tests_are_rejected_naming_the_surviving_mutants():
    """Tests that never probe a boundary let boundary mutants live: rejected, survivors named;
    the same task with boundary cases is accepted."""
    gates = msgspec.structs.replace(GATES, max_mutants=40)
    report = await _gate(_grade_task([95, 85, 50, 60]), gates)
    assert not report.accepted and report.reasons == ["weak_tests"]
    boundary = ("'>=' -> '>'", "90 -> 91", "90 -> 89", "80 -> 81", "80 -> 79")
    assert report.survivors and all(any(b in s for b in boundary) for s in report.survivors)
    assert all("line" in s for s in report.survivors)
    said = " ".join(report.detail)
    assert "survivors:" in said and all(s in said for s in report.survivors)
    strong = await _gate(_grade_task([95, 90, 89, 80, 79, 50, 91, 81]), gates)
    assert strong.accepted, strong.detail


@pytest.mark.bus
async def test_a_wrong_reference_is_unsolvable():
    """A reference that fails its own tests is rejected as unsolvable."""
    task = _tasks("python_functions", [1])[0]
    broken = msgspec.structs.replace(task.verifier, reference=task.verifier.reference.replace(
        "return", "return 1 + ", 1))
    report = await _gate(msgspec.structs.replace(task, verifier=broken))
    assert report.reasons == ["unsolvable"], report.detail


@pytest.mark.bus
async def test_a_shuffling_reference_is_nondeterministic():
    """A reference returning its words in random order passes its unordered tests, but two
    runs return different values: rejected as nondeterministic."""
    reference = ("import random\n\ndef distinct(words):\n    out = list(words)\n"
                 "    random.shuffle(out)\n    return out\n")
    words = [f"w{i}" for i in range(12)]
    cases = [{"args": [words[:n]], "expected": words[:n]} for n in (6, 9, 12)]
    task = Task(task_id="test/distinct", env="test", env_version="1", domain="python",
                prompt="distinct", entry_point="distinct",
                verifier=Verifier(kind="python_io", visible=json.dumps(cases[:1]),
                                  hidden=json.dumps(cases[1:]), reference=reference,
                                  extra={"compare": "unordered", "random_cases": "0"}))
    report = await _gate(task)
    assert report.reasons == ["nondeterministic"], report.detail


@pytest.mark.bus
async def test_a_malformed_record_is_invalid_without_running_anything():
    """Bad case lists and missing references are named, field by field."""
    task = _tasks("python_functions", [0])[0]
    bad = msgspec.structs.replace(task.verifier, hidden="[{", reference="")
    report = await _gate(msgspec.structs.replace(task, verifier=bad))
    assert report.reasons == ["invalid"]
    assert "verifier.hidden" in report.detail[0] and "verifier.reference" in report.detail[0]


@pytest.mark.bus
async def test_humaneval_tasks_pass_solvability_and_determinism():
    """Imported HumanEval problems run through the same gates (mutation off, as configured)."""
    tasks = list(generate(registry.resolve("humaneval", EnvEntry()), 2))
    gates = msgspec.structs.replace(GATES, checks=["determinism"])
    for task in tasks:
        report = await _gate(task, gates)
        assert report.accepted, (task.task_id, report.detail)


@pytest.mark.unit
def test_mutation_verdict_decides_as_soon_as_the_rest_cannot_matter():
    """With 10 mutants at 80%: 8 kills accept, a third survivor rejects, else undecided."""
    assert mutation_verdict(8, 0, 10, 0.8) is True
    assert mutation_verdict(7, 2, 10, 0.8) is None
    assert mutation_verdict(5, 3, 10, 0.8) is False
    assert mutation_verdict(0, 0, 0, 0.8) is True  # nothing to mutate: no evidence against


@pytest.mark.bus
async def test_a_user_environment_loads_from_config_and_passes_the_gates(tmp_path):
    """The README's example: a module named in config generates tasks the gates accept."""
    from runtime import config as config_mod

    path = tmp_path / "run.toml"
    path.write_text('[envs]\nmix = { arithmetic = 1.0 }\n[envs.use.digit_sum]\n'
                    'target = "envs.examples.digit_sum:ENVIRONMENT"\ncount = 6\n')
    cfg = config_mod.load(path)
    found = registry.entry_tasks("digit_sum", cfg.envs.use["digit_sum"])
    assert len(found.tasks) == 6 and {t.domain for t in found.tasks} == {"arithmetic"}
    report = await _gate(found.tasks[0], cfg.envs.gates)
    assert report.accepted and report.mutants >= 3, report.detail


@pytest.mark.unit
def test_an_unknown_environment_is_a_config_error():
    """A name that is neither built in nor given a target says what to do."""
    from bus.errors import ConfigError

    with pytest.raises(ConfigError, match="set target = 'module:ATTRIBUTE'"):
        registry.resolve("nope", EnvEntry())
    with pytest.raises(ConfigError, match="cannot load"):
        registry.resolve("x", EnvEntry(target="envs.nothing_here:ENV"))


@pytest.mark.bus
async def test_verifier_data_the_judge_cannot_use_is_invalid():
    """A structured task whose rule pattern does not compile is the task's fault: invalid."""
    task = _tasks("structured_output", [0])[0]
    path = json.loads(task.verifier.hidden)[0]["path"]
    broken = msgspec.structs.replace(task.verifier, hidden=json.dumps(
        [{"path": path, "matches": "([unclosed"}]))
    report = await _gate(msgspec.structs.replace(task, verifier=broken))
    assert report.reasons == ["invalid"], report.detail
    assert "judge rejects" in report.detail[0]


@pytest.mark.bus
async def test_held_out_gating_stops_each_domain_once_it_has_enough(monkeypatch, tmp_path):
    """The evaluator's choice gates only the tasks its stratified choice names: when all pass
    it is `pick_heldout`'s choice exactly, and far fewer tasks are gated than the split holds."""
    monkeypatch.setenv("WHET_GATE_CACHE", str(tmp_path / "gates"))
    config = EnvsConfig(use={
        "python_functions": EnvEntry(count=120, heldout_share=0.5, checks=[]),
        "structured_output": EnvEntry(count=120, heldout_share=0.5, checks=[])},
        mix={"python": 1.0}, gates=GateConfig(concurrency=2, keep_reports=False))
    seen: list[tuple[int, int]] = []
    chosen = await gated_heldout(config, seed=5, per_domain=6, domain_tasks={"structured": 3},
                                 progress=lambda done, total: seen.append((done, total)))
    assert {d: len(ts) for d, ts in chosen.items()} == {"python": 6, "structured": 3}
    every, _ = collect(config, seed=5, split="heldout")
    first = pick_heldout([t for t, _ in every], 6, domain_tasks={"structured": 3})
    assert chosen == first
    gated = len(seen) - 1  # the first call reports 0 done
    assert seen[-1][1] == 9 and gated == 9
    assert len(every) > 40  # the early stop skipped most of the split


@pytest.mark.bus
async def test_a_rejected_held_out_task_is_replaced_from_its_own_stratum(monkeypatch, tmp_path):
    """Two chosen tasks of one stratum that the gates reject (no reference) give their seats
    to the next two of that stratum; every other chosen task and every stratum's count stay
    as they were, and only the choice and the two replacements are gated."""
    monkeypatch.setenv("WHET_GATE_CACHE", str(tmp_path / "gates"))
    env = registry.resolve("python_functions", EnvEntry())
    tasks = [msgspec.structs.replace(t, split="heldout")
             for t in generate(env, 60, seed=7, levels=[0, 1])]
    first = pick_heldout(tasks, 12)["python"]
    groups = strata(tasks)
    key = next(k for k in groups if sum(stratum_of(t) == k for t in first) == 2
               and len(groups[k]) >= 4)
    broken = {t.task_id for t in groups[key][:2]}
    tasks = [msgspec.structs.replace(t, verifier=msgspec.structs.replace(t.verifier, reference=""))
             if t.task_id in broken else t for t in tasks]
    path = tmp_path / "held.jsonl"
    with path.open("w") as out:
        taskfile.write(out, tasks)
    config = EnvsConfig(use={"held": EnvEntry(file=str(path), count=100, checks=[])},
                        mix={"data": 1.0}, gates=GateConfig(concurrency=2, keep_reports=False))
    seen: list[tuple[int, int]] = []
    chosen = (await gated_heldout(config, seed=0, per_domain=12,
                                  progress=lambda *pair: seen.append(pair)))["python"]
    assert chosen == pick_heldout(tasks, 12, usable=lambda t: t.task_id not in broken)["python"]
    assert sorted(map(stratum_of, chosen)) == sorted(map(stratum_of, first))
    assert {t.task_id for t in first} - {t.task_id for t in chosen} == broken
    assert {t.task_id for t in chosen} - {t.task_id for t in first} == {
        t.task_id for t in groups[key][2:4]}
    assert len(seen) - 1 == 12 + 2 and seen[-1] == (12, 12)
