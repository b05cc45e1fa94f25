"""Quality bonuses as reward arithmetic: the mapping, the pass-only gate, the config check."""

from __future__ import annotations

import itertools

import pytest

from bus.errors import ConfigError
from bus.messages import LayerResult
from judging.attribution import Cause
from judging.config import QualityConfig, RewardConfig
from judging.extract import Candidate
from judging.judgement import conclude
from judging.quality import bonuses, job_spec
from judging.reward import QUALITY_COMPONENTS, compose
from runtime.config import load

pytestmark = pytest.mark.unit

ON = QualityConfig(lint=0.04, types=0.03, runtime=0.03)
WEIGHTS = RewardConfig(tests=0.82, format=0.08, quality=ON)


def _layers(visible, hidden, robustness):
    names = ("visible", "hidden", "robustness")
    return [LayerResult(name="structure", passed=3, total=3, ok=True)] + [
        LayerResult(name=n, passed=p, total=t, ok=p == t) for n, (p, t) in zip(names, (visible, hidden, robustness))]


def test_bonuses_fall_with_findings_and_with_slowness_past_the_allowance():
    """0 findings is the whole weight, findings_to_zero is nothing; runtime is whole up to
    slower_than x the reference and 0 at twice that; unmeasured qualities give no key."""
    clean = bonuses(ON, {"lint": {"findings": 0}, "types": {"findings": 0},
                         "runtime": {"candidate_cpu_s": 0.2, "reference_cpu_s": 0.1}})
    assert clean == pytest.approx({"lint": 0.04, "types": 0.03, "runtime": 0.03})
    messy = bonuses(ON, {"lint": {"findings": 2}, "types": {"findings": 9},
                         "runtime": {"candidate_cpu_s": 0.3, "reference_cpu_s": 0.1}})
    ratio = 0.305 / 0.105
    assert messy == pytest.approx({"lint": 0.04 * 0.6, "types": 0.0, "runtime": 0.03 * (4 - ratio) / 2})
    assert bonuses(ON, {"lint": {"error": "flake8 is not installed"},
                        "runtime": {"error": "the reference fails a hidden test"}}) == {}
    noise = bonuses(ON, {"runtime": {"candidate_cpu_s": 0.004, "reference_cpu_s": 0.0001}})
    assert noise["runtime"] == pytest.approx(0.03)  # microseconds either way are noise


def test_only_a_pass_gets_quality_components_and_only_with_quality_on():
    """conclude gives a pass its bonuses as named components; a failure, a hack and a pass
    judged with quality off have none of those keys."""
    cand = Candidate("def f(): pass\n")
    measured = {"lint": {"findings": 1}, "types": {"findings": 0}}
    good, bad = _layers((2, 2), (3, 3), (4, 4)), _layers((2, 2), (2, 3), (4, 4))
    passed = conclude(cand, good, [], [], None, 1, WEIGHTS, "", measured)
    assert passed.outcome == "pass" and set(passed.components) >= {"lint", "types"}
    assert "runtime" not in passed.components  # not measured, so not given
    assert passed.reward == pytest.approx(0.82 + 0.08 + 0.04 * 0.8 + 0.03)
    assert "lint: 1" in passed.evidence
    failed = conclude(cand, bad, [], [], Cause("model.wrong_answer", "hidden/2"), 1, WEIGHTS, "", measured)
    assert failed.outcome == "fail" and not set(failed.components) & set(QUALITY_COMPONENTS)
    plain = conclude(cand, good, [], [], None, 1, RewardConfig(), "", measured)
    assert plain.outcome == "pass" and not set(plain.components) & set(QUALITY_COMPONENTS)


@pytest.mark.parametrize("weights", [
    RewardConfig(tests=0.82, format=0.08, quality=ON),
    RewardConfig(tests=0.5, format=0.0, quality=QualityConfig(lint=0.2, types=0.1, runtime=0.19)),
    RewardConfig(tests=0.9, format=0.1, maximum=1.5, quality=QualityConfig(lint=0.3, types=0.1)),
])
def test_the_worst_pass_still_outscores_the_best_failure(weights):
    """With any accepted weights, a pass with the worst quality scores at least what the best
    failing attempt can (one test of many failed, or every test passed in the wrong format)."""
    worst_pass, _ = compose(compiled=True, format_ok=True, layers=_layers((2, 2), (50, 50), (10, 10)), turns=1,
                            hack=False, weights=weights, quality={"lint": 0.0, "types": 0.0, "runtime": 0.0})
    fails = [compose(compiled=True, format_ok=fmt, layers=_layers((2, 2), (p, 50), (10, 10)), turns=1,
                     hack=False, weights=weights)[0] for fmt, p in itertools.product((True, False), (49, 50))
             if not (fmt and p == 50)]
    assert worst_pass >= max(fails)
    best_pass, parts = compose(compiled=True, format_ok=True, layers=_layers((2, 2), (50, 50), (10, 10)), turns=1,
                               hack=False, weights=weights, quality=bonuses(weights.quality, {
                                   "lint": {"findings": 0}, "types": {"findings": 0},
                                   "runtime": {"candidate_cpu_s": 0, "reference_cpu_s": 0}}))
    assert best_pass == pytest.approx(worst_pass + weights.quality.total) and parts["clip"] == 0


@pytest.mark.parametrize("body,words", [
    ("[judge.reward.quality]\nlint = 0.05\n", "exceeds maximum"),
    ("[judge.reward]\ntests = 0.1\nformat = 0.0\n[judge.reward.quality]\nlint = 0.1\n", "below the tests weight"),
    ("[judge.reward]\ntests = 0.3\nformat = 0.0\n[judge.reward.quality]\nlint = 0.2\ntypes = 0.2\n",
     "correctness must outweigh quality"),
])
def test_quality_weights_that_could_outweigh_or_be_clipped_are_refused(tmp_path, body, words):
    """Quality on top of the default tests + format (already at maximum) would be clipped
    away; quality worth as much as the tests would outweigh correctness: both are refused."""
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert err.value.key == "judge.reward" and words in str(err.value)


def test_the_job_asks_for_quality_only_when_it_is_on():
    """Off: no quality part in the job spec; on: the weighted measurements and the prefix offset."""
    assert job_spec(QualityConfig(), Candidate("x = 1\n")) is None
    assert job_spec(QualityConfig(runtime=0.1), Candidate("x = 1\n", offset_lines=7)) == {
        "lint": False, "types": False, "runtime": True, "offset": 7, "wall_s": 8.0}


def test_the_type_check_runs_with_the_flags_its_cache_was_built_with():
    """mypy's cache in the tree is only valid for the options it was built with."""
    from judging.harness import measure
    from sandbox import envs

    assert measure.MYPY_FLAGS == envs.MYPY_FLAGS and measure.MYPY_CACHE == envs.MYPY_CACHE
    [warm] = envs.SPECS["python"].prepare
    assert warm[:1 + len(envs.MYPY_FLAGS)] == ("mypy", *envs.MYPY_FLAGS)
    assert f"--cache-dir={envs.MYPY_CACHE}" in warm


def test_measuring_quality_grows_the_jobs_limits_but_not_the_tests_budgets():
    """The job gets the measurements' time, CPU and memory on top; the harness's test budget,
    per-call limits and the candidate's memory cap are still the task's."""
    import json

    from judging.extract import from_completion
    from judging.jobs import build_job
    from tests.support.judging import io_task

    task = io_task([([[1]], 1)], [([[2]], 2)], "def f(xs):\n    return sum(xs)\n")
    cand = from_completion(task, "def f(xs):\n    return sum(xs)\n")
    plain, measured = build_job(task, cand, nonce="n"), build_job(task, cand, nonce="n", quality=ON)
    assert measured.limits.timeout_s == plain.limits.timeout_s + ON.time_s
    assert measured.limits.cpu_s == plain.limits.cpu_s + ON.time_s
    assert measured.limits.memory_mb == plain.limits.memory_mb + 128
    spec, base = json.loads(measured.stdin), json.loads(plain.stdin)
    assert spec.pop("quality") == {"lint": True, "types": True, "runtime": True, "offset": 0, "wall_s": 8.0}
    assert spec == base and "quality" not in base
