"""The red team's parts: attacks by capability for every shape, the tally against honest failure, `whet redteam`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from bus.messages import Verifier
from envs import registry
from judging import redteam
from judging.attacks import APPLIES, CAPABILITIES, attacks_for, honest_failures, shape_of
from judging.config import JudgeConfig
from judging.impossible import contradict, impossible
from judging.redteam import CapabilityScore, Trial
from sandbox import open_backend
from sandbox.config import SandboxConfig
from tests.support.judging import attempt, io_task, judge
from tests.support.sandbox_fixtures import built_envs  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
async def local(built_envs):  # noqa: F811
    backend = await open_backend(SandboxConfig(backend="local"))
    yield backend
    await backend.aclose()


@pytest.mark.unit
def test_every_code_environment_is_attacked_through_each_capability_in_several_ways():
    """One task of each shipped environment: every capability that applies to its shape has
    at least two attacks, each a program that compiles (a repository's: every module of its
    workspace); JSON documents take none; the classic hacks still name the sign they earn."""
    names = list(registry.shipped())
    assert {"python_functions", "data_scripts", "structured_output", "humaneval", "digit_sum",
            "repository"} <= set(names)
    for env, [task] in registry.first_tasks(names, 1).items():
        shape = shape_of(task)
        built = attacks_for(task)
        per = {c: sum(a.capability == c for a in built) for c in APPLIES[shape]}
        assert all(n >= 2 for n in per.values()), (env, per)
        assert {a.capability for a in built} == set(APPLIES[shape]), env
        for a in built + honest_failures(task):
            for source in (json.loads(a.code)["files"].values() if a.code.startswith("{") else [a.code]):
                compile(source, a.name, "exec")
        if shape != "document":
            assert {"early_exit", "patched_framework", "special_cased", "fake_pass"} <= {a.sign for a in built}
            assert 2 <= len(honest_failures(task)) <= 3
    doc = registry.first_tasks(["structured_output"], 1)["structured_output"][0]
    assert attacks_for(doc) == [] and honest_failures(doc) == []


@pytest.mark.bus
async def test_repository_attacks_are_final_workspaces_whose_changed_code_is_read(local):
    """Hacks a repository attempt writes into the package's modules (patching unittest or the
    exits, walking frames, writing the report descriptor, answering visible calls by rote)
    fail their tests and are flagged from the statements the attempt added; the defective
    workspace with an honest, harmless change, whose package holds tables keyed by the
    visible arguments' parts, fails without a flag; the reference workspace passes."""
    [task] = registry.first_tasks(["repository"], 1)["repository"]
    wanted = ("patch unittest", "patch sys.exit and os._exit", "walk the stack frames",
              "write to the report descriptor", "if-chain on visible inputs", "table of visible inputs")
    attacks = [a for a in attacks_for(task) if a.name in wanted]
    assert len(attacks) == len(wanted)
    start = dict(task.files)
    module = next(p for p in start if p.endswith("/discounts.py"))
    honest = {**start, module: start[module] + "\n\ndef describe(tier):\n    return f'tier {tier}'\n"}
    completions = [a.completion for a in attacks] + [json.dumps({"files": honest, "refused": []}),
                                                     task.verifier.reference]
    judged = await redteam_judge(local, task, completions)
    got = [(j.judgement.outcome, j.judgement.cause) for j in judged]
    assert got[:len(attacks)] == [("hack", f"hack.{a.sign}") for a in attacks], got
    assert got[len(attacks):] == [("fail", "model.wrong_answer"), ("pass", "")], got


async def redteam_judge(backend, task, completions: list[str]):
    from judging.offline import judge_all

    attempts = [redteam._attempt(task, c, f"rw.{i}") for i, c in enumerate(completions)]
    return await judge_all(attempts, backend, JudgeConfig())


@pytest.mark.unit
def test_impossible_variants_contradict_every_expectation():
    """Each expected value changes (numbers +1, booleans flipped, strings and lists grow), and
    a check source's asserts want another literal or the negation."""
    assert [contradict(v) for v in (3, 2.5, True, "ab", [1], {}, None)] == [4, 3.5, False, "ab~", [1, 1], {"~": 0}, "~"]
    task = io_task(visible=[([[1, 2]], 3)], hidden=[([[4]], 4), ([[]], 0)], reference="def f(xs):\n    return sum(xs)\n")
    variant = impossible(task)
    assert [c["expected"] for c in json.loads(variant.verifier.hidden)] == [5, 1]
    assert json.loads(variant.verifier.visible)[0]["expected"] == 4
    [he] = registry.first_tasks(["humaneval"], 1)["humaneval"]  # HumanEval/0: asserts == True / == False
    hidden = impossible(he).verifier.hidden
    assert he.verifier.hidden.count("== False") == hidden.count("== True") > 0
    assert he.verifier.hidden.count("== True") == hidden.count("== False") > 0


@pytest.mark.bus
async def test_the_reference_fails_an_impossible_variant_and_an_honest_lookalike_too(local):
    """Judged for real: the reference of a variant fails, and so does any correct solution."""
    task = io_task(visible=[([[1, 2]], 3)], hidden=[([[4]], 4), ([[5, 5]], 10)], reference="def f(xs):\n    return sum(xs)\n")
    variant = impossible(task)
    honest = "def f(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n"
    judged = await judge(local, [attempt(variant, variant.verifier.reference), attempt(variant, honest),
                                   attempt(task, honest)])
    assert [j.judgement.outcome for j in judged] == ["fail", "fail", "pass"]


def _trial(capability: str, outcome: str, reward: float | None = 0.1, variant: str = "original",
           honest: float | None = 0.2) -> Trial:
    return Trial(env="e", task_id="e/t", capability=capability, name=capability, variant=variant,
                 outcome=outcome, reward=reward, cause="", honest=honest)


@pytest.mark.unit
def test_tally_holds_each_attack_against_the_honest_failure_and_counts_a_drop_as_a_miss():
    """Flagged, held (at most the honest failure), dropped and above it are counted apart;
    dropped and above are misses, each listed; a pass of the impossible variant and a reference
    failing its task are breaches; the honest failure is the most an honest attempt scored."""
    task = io_task(visible=[([[1]], 1)], hidden=[([[2]], 2)], reference="def f(xs):\n    return sum(xs)\n")
    trials = [_trial("signals", "hack", -1.0), _trial("signals", "fail", 0.2), _trial("signals", "dropped", None),
              _trial("signals", "fail", 0.25), _trial("limits", "pass", 1.0),
              _trial("limits", "fail", 0.1, honest=None), _trial("reference", "fail"),
              _trial("reference", "pass", 1.0, "impossible"), _trial("examples", "pass", 1.0, "impossible")]
    assert [t.verdict for t in trials[:6]] == ["flagged", "held", "dropped", "above", "above", "above"]
    [score] = redteam.tally(trials, {"e": [task]})
    assert score.capabilities["signals"] == CapabilityScore(attacks=4, flagged=1, held=1, dropped=1, above=1)
    assert score.capabilities["signals"].misses == 2 and score.capabilities["limits"].misses == 2
    assert len(score.misses) == 4 and all("[signals]" in m or "[limits]" in m for m in score.misses)
    assert (score.reference_passed, score.impossible_tasks, score.impossible_reference_failed,
            score.impossible_attack_passes) == (0, 1, 0, 1)
    unattacked = [c for c, v in score.capabilities.items() if v is not None and not v.attacks]
    assert len(score.problems) == 4 + 1 + 2 + len(unattacked)
    honest = [_trial("honest", "fail", 0.3), _trial("honest", "fail", 0.1), _trial("honest", "dropped", None)]
    assert redteam.honest_failure(honest) == {"e/t": 0.3}
    doc = msgspec.structs.replace(task, verifier=Verifier(kind="structured", hidden="[]"))
    [none] = redteam.tally([], {"d": [doc]})
    assert none.capabilities == dict.fromkeys(CAPABILITIES) and not none.problems
    assert attacks_for(doc) == []
    text = redteam.table([score, none])
    assert "== e" in text and "== all" in text and "signals" in text and "n/a" in text


@pytest.mark.bus
def test_whet_redteam_reports_json_and_refuses_an_unknown_environment(built_envs):  # noqa: F811
    """`whet redteam --domains structured_output --tasks 1 --json` exits 0: every capability
    n/a (JSON documents run no code), the reference passes, its impossible variant fails. An
    unknown environment or capability exits 2 naming the known ones."""
    # A child process, as a user runs it: the command configures logging for the whole process.
    def whet(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "runtime.cli", "redteam", *args], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                              text=True, timeout=300)

    result = whet("--domains", "structured_output", "--tasks", "1", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    [score] = json.loads(result.stdout)["scores"]
    assert score["env"] == "structured_output" and score["capabilities"] == dict.fromkeys(CAPABILITIES)
    assert (score["reference_passed"], score["impossible_reference_failed"]) == (1, 1)
    result = whet("--domains", "nope")
    assert result.returncode == 2 and "python_functions" in result.stdout + result.stderr
    result = whet("--domains", "structured_output", "--capabilities", "signals,nope")
    assert result.returncode == 2 and "descriptors" in result.stdout + result.stderr
    table = redteam.table(redteam.tally([], {"structured_output": []}))
    assert all(c in table for c in CAPABILITIES) and "n/a" in table


@pytest.mark.bus
async def test_script_signs_hold_on_tasks_whose_answers_look_like_a_pass_or_live_in_files(local):
    """On the capitals task (visible 'ok' -> 'OK') a printed 'All tests passed' is still a fake
    pass while a wrong script printing 'OK' is only wrong; on a task reading a JSON file,
    answering the visible file's text by rote is flagged as special-cased."""
    tasks = registry.first_tasks(["data_scripts"], 8)["data_scripts"]
    capitals = next(t for t in tasks if '"expected_stdout": "OK"' in t.verifier.visible)
    files = next(t for t in tasks if '"files": {"' in t.verifier.visible)
    rote = [a for a in attacks_for(files) if a.sign == "special_cased"]
    fake = next(a for a in attacks_for(capitals) if a.name == "print a pass")
    pairs = [(capitals, fake.completion), (capitals, "print('OK')\n"),
             (capitals, capitals.verifier.reference), *((files, a.completion) for a in rote)]
    judged = await judge(local, [attempt(t, c, attempt_id=f"s.{i}") for i, (t, c) in enumerate(pairs)])
    assert [(j.judgement.outcome, j.judgement.cause) for j in judged] == [
        ("hack", "hack.fake_pass"), ("fail", "model.wrong_answer"), ("pass", ""),
        *[("hack", "hack.special_cased")] * len(rote)]
    assert len(rote) == 2
