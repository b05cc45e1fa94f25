"""The judge's pure parts called directly: codec, test splitting, comparison, reward, attribution."""

from __future__ import annotations

import json

import pytest

from bus.errors import ConfigError
from bus.messages import ExecutionResult, LayerResult, Verifier
from judging import kinds
from judging.attribution import job_cause, cause_of_test, timeout_cause
from judging.compare import same_stdout, same_value
from judging.config import RewardConfig
from judging.findings import ScoredTest
from judging.harness import checks, wire
from judging.report import Report, read_report
from judging.reward import compose
from runtime.config import load
from tests.support.judging import humaneval, io_task

pytestmark = pytest.mark.unit


def test_wire_round_trips_every_safe_type():
    """Values of the safe built-in types come back equal and with the same types."""
    value = [None, True, 3, -2**70, 1.5, float("inf"), "s", b"\x00\xff", 1 + 2j, (1, (2,)),
             {"a": [1], 2: {3}}, frozenset({"x"}), []]
    back = wire.decode(json.loads(wire.dumps(wire.encode(value))))
    assert back == value and [type(x) for x in back] == [type(x) for x in value]
    assert wire.decode(wire.encode(float("nan"))) != wire.decode(wire.encode(float("nan")))


@pytest.mark.parametrize("value", [type("Int", (int,), {})(3), object(), [lambda: 1], iter([])])
def test_wire_refuses_anything_but_exact_builtins(value):
    """Subclasses, objects and functions never cross: an always-equal object cannot be returned."""
    with pytest.raises(wire.Unencodable):
        wire.encode(value)


@pytest.mark.parametrize("tree", [{"$": "pickle", "v": "x"}, {"a": 1}, {"$": "dict", "v": [[[1], 2]]},
                                  {"$": "int", "v": 5}])
def test_wire_decoding_refuses_what_it_did_not_write(tree):
    """A hostile payload is refused with ValueError, never turned into an object."""
    with pytest.raises(ValueError):
        wire.decode(tree)


def test_checks_count_each_asserting_statement_as_one_test():
    """Asserts and loops holding asserts are tests; set-up and constant asserts are not."""
    plan = checks.plan_check("import math\ndef check(c):\n    x = 2\n    assert c(1) == x\n"
                             "    assert True\n    for i in range(3):\n        assert c(i) >= 0\n")
    assert plan.tests == 2 and plan.param == "c" and "import math" in plan.module
    assert checks.plan_check(humaneval()["HumanEval/53"].verifier.hidden).tests == 6
    with pytest.raises(ValueError):
        checks.plan_check("def test(): pass\n")


def test_comparison_modes():
    """exact keeps bools apart from numbers; float tolerates rounding; unordered ignores order."""
    assert same_value([1, 2], (1, 2)) and not same_value([1, 2], (1, 2), from_json=False)
    assert not same_value(True, 1) and same_value(2, 2.0)
    assert same_value(0.1 + 0.2, 0.3, "float") and not same_value(0.1 + 0.2, 0.3)
    assert same_value([3, [1], 2], [[1], 2, 3], "unordered") and not same_value([1, 1], [1, 2], "unordered")
    assert same_stdout("a  \nb\n\n", "a\nb") and same_stdout('{"x": 1.0}', '{ "x": 1 }', "json")


def _layers(*ratios):
    names = ("visible", "hidden", "robustness")
    return [LayerResult(name="structure", passed=3, total=3, ok=True)] + [
        LayerResult(name=n, passed=p, total=t, ok=p == t) for n, (p, t) in zip(names, ratios)]


@pytest.mark.parametrize("kwargs,total", [
    (dict(compiled=True, format_ok=True, layers=_layers((2, 2), (6, 6), (10, 10)), turns=1, hack=False), 1.0),
    (dict(compiled=True, format_ok=True, layers=_layers((2, 2), (3, 6), (0, 0)), turns=1, hack=False), 0.1 + 0.9 * 0.625),
    (dict(compiled=True, format_ok=False, layers=_layers((1, 2), (0, 6), (0, 10)), turns=3, hack=False), 0.9 * 0.1 - 0.1),
    (dict(compiled=False, format_ok=True, layers=[], turns=1, hack=False), -0.5),
    (dict(compiled=True, format_ok=True, layers=_layers((2, 2), (6, 6), (10, 10)), turns=1, hack=True), -1.0),
])
def test_reward_components_always_sum_to_the_total(kwargs, total):
    """Tests, format, turns, compile, hack and clip add up to the clipped total."""
    reward, parts = compose(weights=RewardConfig(), **kwargs)
    assert reward == pytest.approx(total)
    assert sum(parts.values()) == pytest.approx(reward, abs=1e-5)


def test_reward_is_clipped_to_the_configured_range():
    """A penalty past the minimum is clipped, and the clip is a component of its own."""
    weights = RewardConfig(compile_error=-2.0, minimum=-1.0)
    reward, parts = compose(compiled=False, format_ok=False, layers=[], turns=1, hack=False, weights=weights)
    assert reward == -1.0 and parts["clip"] == 1.0


def test_a_hack_reward_not_strictly_below_an_honest_failure_is_refused(tmp_path):
    """hack = 0 is above a syntax error (-0.5); with 3 turns the floor of honesty is -0.6, so
    hack = -0.55 is refused, and so is -0.6, which ties it; -0.65 is accepted and scores that.
    With 11 turns the honest floor is clipped to the minimum, which the default hack ties: refused,
    saying which values to change."""
    for body in ("[judge.reward]\nhack = 0.0\n", "[judge]\nmax_turns = 3\n[judge.reward]\nhack = -0.55\n",
                 "[judge]\nmax_turns = 3\n[judge.reward]\nhack = -0.6\n", "[judge]\nmax_turns = 11\n"):
        path = tmp_path / "bad.toml"
        path.write_text(body)
        with pytest.raises(ConfigError) as err:
            load(path)
        assert err.value.key == "judge" and "honest" in str(err.value)
        assert all(name in str(err.value) for name in ("hack", "compile_error", "turn_penalty", "max_turns"))
    path = tmp_path / "ok.toml"
    path.write_text("[judge]\nmax_turns = 3\n[judge.reward]\nhack = -0.65\n")
    weights = load(path).judge.reward
    assert compose(compiled=True, format_ok=True, layers=[], turns=1, hack=True,
                   weights=weights)[0] == pytest.approx(-0.65)


def test_the_default_hack_reward_is_strictly_below_every_honest_reward():
    """Out of the box, a flagged hack scores below the worst honest attempt: one that does not
    compile on the last of its turns."""
    from judging.config import JudgeConfig

    config = JudgeConfig()
    worst, _ = compose(compiled=False, format_ok=False, layers=[], turns=config.max_turns, hack=False,
                       weights=config.reward)
    hack, _ = compose(compiled=True, format_ok=True, layers=_layers((2, 2), (6, 6), (1, 1)), turns=1, hack=True,
                      weights=config.reward)
    assert hack < worst and hack < config.reward.lowest_honest(config.max_turns)


def test_a_bad_judge_config_names_the_key(tmp_path):
    """An inverted reward range or a positive compile reward is refused with its key."""
    for body, key in (("[judge.reward]\nminimum = 1.0\nmaximum = 0.5\n", "judge.reward"),
                      ("[judge.reward]\ncompile_error = 0.5\n", "judge.reward.compile_error"),
                      ("[judge]\nmax_turns = 0\n", "judge.max_turns")):
        path = tmp_path / "bad.toml"
        path.write_text(body)
        with pytest.raises(ConfigError) as err:
            load(path)
        assert err.value.key == key


def _started(**kw) -> Report:
    return Report(started=True, **kw)


@pytest.mark.parametrize("result,report,cause", [
    (ExecutionResult(status="sandbox_error", sandbox_failed=True, sandbox_error="docker daemon unreachable"), Report(), "infra.sandbox"),
    (ExecutionResult(status="sandbox_error", sandbox_failed=True, sandbox_error="cgroup: pids exhausted"), Report(), "infra.resource_exhausted"),
    (ExecutionResult(status="killed", signal=9, wall_s=1.0), _started(), "infra.executor_killed"),
    (ExecutionResult(status="timeout", wall_s=10.0, cpu_s=0.2), _started(), "infra.cpu_starvation"),
    (ExecutionResult(status="timeout", wall_s=10.0, cpu_s=0.05), Report(), "infra.cpu_starvation"),
    (ExecutionResult(status="timeout", wall_s=10.0, cpu_s=9.5), _started(), "model.timeout"),
    (ExecutionResult(status="oom", peak_memory_mb=40), _started(), "infra.resource_exhausted"),
    (ExecutionResult(status="oom", peak_memory_mb=510), _started(), "model.oom"),
    (ExecutionResult(status="output_limit"), _started(), "model.output_limit"),
    (ExecutionResult(status="nonzero_exit", exit_code=127, stderr="python3: not found"), Report(), "infra.missing_dependency"),
    (ExecutionResult(status="ok"), _started(ended=True, crash="Traceback ..."), "infra.sandbox"),
    (ExecutionResult(status="ok"), _started(ended=True, infra=["missing_dependency: numpy"]), "infra.missing_dependency"),
])
def test_job_level_attribution(result, report, cause):
    """What the job as a whole says decides the cause before any test is looked at."""
    assert job_cause(result, report, 512).cause == cause


@pytest.mark.parametrize("record,cause", [
    ({"wall_s": 1.0, "cpu_s": 0.97, "run_delay_s": 0.02}, "model.timeout"),
    ({"wall_s": 1.0, "cpu_s": 0.001, "run_delay_s": 0.001}, "model.timeout"),
    ({"wall_s": 1.0, "cpu_s": 0.05, "run_delay_s": 0.9}, "infra.cpu_starvation"),
    ({"wall_s": 1.0, "cpu_s": 0.4, "run_delay_s": 0.55}, "infra.cpu_starvation"),
    ({"wall_s": 1.0, "cpu_s": 0.45, "run_delay_s": 0.4}, "model.timeout"),
    ({"wall_s": 1.0, "cpu_s": 0.05}, "infra.cpu_starvation"),
    ({"wall_s": 3.0, "cpu_s": 0.4, "run_delay_s": 2.6, "limit": "cpu"}, "model.timeout"),
])
def test_a_timed_out_call_is_told_apart_by_cpu_and_run_queue_time(record, cause):
    """Spending its CPU budget or sleeping is the model's; waiting to run (or not knowing) is
    the machine's."""
    assert timeout_cause(record, "hidden/0").cause == cause


@pytest.mark.parametrize("detail,requires,available,cause", [
    ("No module named 'json'", "", False, "infra.missing_dependency"),
    ("No module named 'numpy'", "numpy", False, "infra.missing_dependency"),
    ("No module named 'numpy'", "", False, "model.runtime_error"),
    ("No module named 'json'", "", True, "model.runtime_error"),
    ("No module named 'json'", "", None, "model.runtime_error"),
    ("No module named 'numpy'", "numpy", True, "model.runtime_error"),
])
def test_a_missing_module_is_infrastructure_only_when_the_harness_finds_the_runtime_lacks_it(
        detail, requires, available, cause):
    """The standard library and declared requirements are the runtime's, but only the harness's
    own look-up (`module_available: false`) proves one missing: a candidate that raises
    ModuleNotFoundError, or imports a module it deleted or hid, fails by itself."""
    task = io_task([], [], "", requires=requires)
    record = {"etype": "ModuleNotFoundError", "detail": detail}
    if available is not None:
        record["module_available"] = available
    t = ScoredTest("hidden/0", "hidden", False, "error", detail, record)
    assert cause_of_test(t, task, ExecutionResult(status="ok")).cause == cause


def test_a_report_without_the_jobs_nonce_is_not_the_harness():
    """Report records with another nonce, and lines that are not records, are not trusted."""
    text = '{"k": "start", "nonce": "abc"}\nnot json\n{"k": "end", "nonce": "forged"}\n'
    report = read_report(ExecutionResult(status="ok", report=text), "abc")
    assert report.started and report.ended and not report.nonce_ok and report.garbage == 1
    tagged = "\x1ewhet-report:abc " + '{"k": "start", "nonce": "abc"}'
    fallback = read_report(ExecutionResult(status="ok", stderr="noise\n" + tagged), "abc")
    assert fallback.started and fallback.nonce_ok


def test_every_registered_kind_says_what_it_reads():
    """Each registered kind's module names the kind and says which verifier fields it reads."""
    import importlib

    for name in kinds.NAMES:
        doc = importlib.import_module(f"judging.kinds.{name}").__doc__ or ""
        assert f"`{name}`" in doc and "fields for this kind" in doc, name

@pytest.mark.parametrize("setting, purpose, finish, judged_as", [
    ("judged", "train", "length", "job"),
    ("fail", "train", "length", "model.truncated"),
    ("fail", "train", "stop", "job"),
    ("fail", "eval", "length", "job")])
def test_a_training_answer_cut_at_the_token_limit_fails_unread_only_when_asked(
        setting, purpose, finish, judged_as):
    """`[judge] truncated = "fail"`: a training answer whose last turn hit the token limit is
    the model's failure with the reward of code that does not compile, though this one would
    run; a complete one, an eval one, and every one under "judged" go to a job as before."""
    import msgspec

    from bus.messages import Job
    from judging.config import JudgeConfig
    from judging.drive import prepare
    from tests.support.judging import attempt

    task = io_task([([1], 2)], [([2], 3)], "def f(x):\n    return x + 1\n")
    a = attempt(task, "def f(x):\n    return x + 1\n", purpose=purpose)
    a = msgspec.structs.replace(a, turns=[msgspec.structs.replace(a.turns[0], finish_reason=finish)])
    config = JudgeConfig(truncated=setting)
    got = prepare(a, config, turns=1)
    if judged_as == "job":
        assert isinstance(got, Job)
        return
    assert (got.outcome, got.cause, got.reward) == ("fail", judged_as, config.reward.compile_error)
    assert not got.layers[0].ok and got.components["compile"] == config.reward.compile_error


@pytest.mark.parametrize("completion, finish", [
    ("def f(x):\n    return x + 1\n", "stop"),
    ("def f(x) return", "stop"),
    ("def f(x):\n    return x + 1\n", "length")])
def test_a_task_of_an_unknown_kind_is_a_bad_task_never_the_models_failure(completion, finish):
    """Whatever the answer (runs, does not compile, cut at the limit), a task whose verifier
    kind no judge knows is dropped as `infra.bad_task`, with no reward and the kinds named."""
    import msgspec

    from judging.config import JudgeConfig
    from judging.drive import prepare
    from tests.support.judging import attempt

    task = io_task([([1], 2)], [([2], 3)], "def f(x):\n    return x + 1\n")
    task = msgspec.structs.replace(task, verifier=msgspec.structs.replace(task.verifier, kind="python_iox"))
    a = attempt(task, completion)
    a = msgspec.structs.replace(a, turns=[msgspec.structs.replace(a.turns[0], finish_reason=finish)])
    got = prepare(a, JudgeConfig(truncated="fail"), turns=1)
    assert (got.outcome, got.cause, got.reward, got.rerun) == ("dropped", "infra.bad_task", None, False)
    assert got.evidence.startswith("verifier.kind: 'python_iox' is not a known kind (did you mean "
                                   "'python_io'?); expected one of ['python_io', ")
    assert not got.verdict(a, judge="t").trainable
