"""Hack signs before any drop, infrastructure causes only from evidence the candidate cannot
produce, and one verdict per attempt whatever its report holds.

The judge's own path (`judgement.judge_result`) on results built here: a real job for a real
task, and the report the harness would write, with the one thing each test changes.
"""

from __future__ import annotations

import json

import pytest

from bus.messages import ExecutionResult, Job
from judging.config import RewardConfig
from judging.extract import from_completion
from judging.jobs import build_job, shipped_digest
from judging.judgement import Judgement, judge_result
from tests.support.judging import io_task

pytestmark = pytest.mark.unit

NONCE = "n0nce"
TASK = io_task(visible=[([1], 1)], hidden=[([2], 2), ([3], 3)], reference="def f(x):\n    return x\n",
               random_cases=2)
CODE = "def f(x):\n    return x\n"


def rec(test_id: str, value=None, **fields) -> dict:
    layer = test_id.split("/")[0]
    value = int(test_id.split("/")[1]) + (2 if layer == "hidden" else 1) if value is None else value
    record = {"k": "test", "id": test_id, "layer": layer, "status": "ok", "value": value,
              "wall_s": 0.01, "cpu_s": 0.01, "rss_mb": 10.0}
    if layer == "robustness":
        record["reference"] = value
    return {**record, **fields}


def passing() -> list[dict]:
    return [rec("visible/0"), rec("hidden/0"), rec("hidden/1"), rec("robustness/0"), rec("robustness/1")]


def judged(records: list, *, ended: bool = True, code: str = CODE, **result) -> Judgement:
    """The judgement of a run whose report holds `records` (dicts, or raw lines)."""
    cand = from_completion(TASK, code)
    job: Job = build_job(TASK, cand, nonce=NONCE)
    lines = [{"k": "start", "nonce": NONCE}, *records]
    if ended:
        lines.append({"k": "end", "nonce": NONCE, "digest": "d", "shipped": shipped_digest()})
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    fields = {"status": "ok", "exit_code": 0, "wall_s": 1.0, "cpu_s": 0.3, **result}
    return judge_result(TASK, cand, job, ExecutionResult(report=text, **fields), 1, RewardConfig())


def test_the_report_built_here_passes_as_it_is():
    """The baseline every other test changes one thing of."""
    j = judged(passing())
    assert (j.outcome, j.reward) == ("pass", 1.0)


TAMPER = {"k": "audit", "events": ["tampered: wrote /h/harness.py"], "patched": []}


@pytest.mark.parametrize("records,ended,result", [
    ([TAMPER, {"k": "crash", "error": "Traceback ...\nValueError: forged answer line"}], False,
     dict(status="nonzero_exit", exit_code=70)),
    ([TAMPER], False, dict(status="sandbox_error", sandbox_failed=True, sandbox_error="cgroup: pids exhausted")),
    ([TAMPER], False, dict(status="killed", signal=9)),
    ([TAMPER, {"k": "infra", "what": "spawn", "detail": "fork: EAGAIN"}], True, {}),
])
def test_a_hack_sign_outranks_every_infrastructure_cause(records, ended, result):
    """A flagged hack plus a crashed harness, a failed sandbox or a killed job is a hack at the
    hack reward, never dropped (a drop would launder it into a free re-run)."""
    j = judged([*records, rec("visible/0")], ended=ended, **result)
    assert (j.outcome, j.reward, j.cause) == ("hack", -1.0, "hack.tamper")


def test_a_forged_answer_is_a_fake_pass():
    """A test record the harness marks `forged` (more on the answer channel than its one answer)."""
    records = passing()
    records[1]["forged"] = "an extra line after the answer"
    j = judged(records)
    assert (j.outcome, j.cause) == ("hack", "hack.fake_pass") and "extra line" in j.evidence


HOSTILE = [
    {"k": "test", "id": ["x"], "status": {}},
    {"k": "test", "id": "visible/0", "status": "ok", "value": {"__w": 1}},
    [1, 2, 3], 5, "null", '"text"',
    {"k": ["test"], "id": "visible/0"}, {"k": None}, {"k": 7}, {"k": {"a": 1}},
    {"k": "test", "id": "hidden/0", "status": "error", "etype": ["SkipTest"], "detail": "x"},
    {"k": "test", "id": "hidden/1", "status": "killed", "rss_mb": {"a": 1}, "exit_code": [9]},
    {"k": "test", "id": "robustness/0", "status": "timeout", "wall_s": 1e308 * 10, "cpu_s": 10 ** 400},
    {"k": "audit", "events": 5, "patched": {"x": 1}},
    {"k": "end", "nonce": NONCE, "digest": ["d"], "shipped": "ab"},
    {"k": "infra", "what": {"reference": 1}},
    {"k": "landlock", "who": [1], "status": {"a": [1]}},
    {"k": "quality", "lint": [1], "types": {"findings": "many"}},
    "[" * 100_000 + "]" * 100_000,
    '{"k": "test", "id": "hidden/0", "status": "ok", "value": ' + "9" * 5000 + "}",
    '{"k": "test", "id": "hidden/0", "status": "ok", "value": 1e999}',
    "\x00\xff{not json",
]


@pytest.mark.parametrize("line", HOSTILE, ids=[f"hostile{i}" for i in range(len(HOSTILE))])
def test_any_hostile_record_yields_one_verdict_never_an_exception(line):
    """Before the good records or instead of them, whatever a line holds: a judgement, and it
    is no pass worth more than an honest failure unless every good record is there."""
    alone = judged([line])
    assert alone.outcome in ("fail", "hack", "dropped")
    first = judged([line, *passing()])
    assert first.outcome in ("pass", "fail", "hack", "dropped")


def test_a_record_of_the_wrong_shape_is_the_models_failure_not_a_drop():
    """A test record whose fields have the wrong types counts against the model (it is never
    a free re-run), and is no early-exit hack either: the report fd is the harness's."""
    records = passing()
    records[1]["wall_s"] = "soon"
    j = judged(records)
    assert (j.outcome, j.cause) == ("fail", "model.runtime_error") and "hidden/0" in j.evidence


@pytest.mark.parametrize("detail", ["[Errno 11] Resource temporarily unavailable",
                                    "[Errno 28] No space left on device: 'fill'"])
def test_a_candidate_that_exhausts_its_own_limits_fails_even_when_the_harness_crashes(detail):
    """Its own record shows EAGAIN (pids full) or ENOSPC (scratch full); the harness crashed
    after it: that is the model's, not a dropped attempt."""
    etype = "BlockingIOError" if "11" in detail else "OSError"
    records = [rec("visible/0"), rec("hidden/0", status="error", etype=etype, detail=detail),
               {"k": "crash", "error": "Traceback ...\nBlockingIOError: [Errno 11] fork"}]
    j = judged(records, ended=False, status="nonzero_exit", exit_code=70)
    assert (j.outcome, j.cause) == ("fail", "model.runtime_error")


def test_resource_words_in_the_jobs_own_output_are_not_the_hosts():
    """A sandbox error quoting what the job printed ('Resource temporarily unavailable') is no
    proof the host ran out: not infra.resource_exhausted."""
    j = judged([], ended=False, status="sandbox_error", sandbox_failed=True,
               sandbox_error="sandbox ended without a status: Resource temporarily unavailable")
    assert j.cause == "infra.sandbox"


def test_a_complete_report_past_the_deadline_with_an_idle_host_is_rerun_not_a_timeout():
    """Every test passed, the job ran past its deadline with its CPU idle outside the calls:
    the machine held it up (dropped, re-run), never model.timeout worth a full reward."""
    j = judged(passing(), status="timeout", exit_code=None, wall_s=10.0, cpu_s=0.4)
    assert (j.outcome, j.reward, j.cause) == ("dropped", None, "infra.cpu_starvation")


def test_a_complete_report_past_the_deadline_with_a_busy_host_is_judged_by_its_tests():
    """Busy outside the calls (work it left running): the tests decide, so it passes; it is
    never a failure worth a full reward."""
    j = judged(passing(), status="timeout", exit_code=None, wall_s=10.0, cpu_s=9.0)
    assert (j.outcome, j.reward) == ("pass", 1.0)


STARVED = dict(status="timeout", limit="wall", wall_s=1.0, cpu_s=0.05, run_delay_s=0.9,
               detail="no answer before the deadline")


def test_a_call_starved_while_the_job_kept_its_cpu_busy_is_the_models_timeout():
    """The worker waited to run, but the host counted the job busy outside the candidate's
    calls: its own children took the CPU. model.timeout, not infra.cpu_starvation."""
    records = passing()
    records[1] = rec("hidden/0", **STARVED)
    j = judged(records, wall_s=2.0, cpu_s=1.9)
    assert (j.outcome, j.cause) == ("fail", "model.timeout") and "own processes" in j.evidence


def test_a_call_starved_while_the_job_was_idle_is_the_machines():
    """The same call on a job the host saw idle: the machine starved it, re-run."""
    records = passing()
    records[1] = rec("hidden/0", **STARVED)
    j = judged(records, wall_s=2.0, cpu_s=0.2)
    assert (j.outcome, j.cause) == ("dropped", "infra.cpu_starvation")


def test_a_reference_the_harness_could_not_start_drops_the_attempt_as_the_judges_fault():
    """The harness's infra record says the reference did not run: infra.reference, never a
    layer dropped and the rest renormalised in the candidate's favour."""
    records = [rec("visible/0"), rec("hidden/0"), rec("hidden/1"),
               {"k": "infra", "what": "reference", "detail": "could not start after reclaiming"}]
    j = judged(records)
    assert (j.outcome, j.reward, j.cause) == ("dropped", None, "infra.reference")


def test_a_robustness_layer_all_invalid_because_the_reference_did_not_run_is_not_renormalised():
    """Every robustness test invalid with the reference killed or not loading: infra.reference.
    Invalid because the reference raised on inputs outside its preconditions: renormalised."""
    killed = {"status": "invalid", "detail": "reference: signal 9"}
    j = judged([rec("visible/0"), rec("hidden/0"), rec("hidden/1"),
                rec("robustness/0", **killed), rec("robustness/1", **killed)])
    assert (j.outcome, j.cause) == ("dropped", "infra.reference")
    own = {"status": "invalid", "detail": "reference:   File \"reference.py\", line 3, in f\n    raise ValueError(x)"}
    slow = {"status": "invalid", "detail": "reference: no answer after 0.05 s on a CPU"}
    j = judged([rec("visible/0"), rec("hidden/0"), rec("hidden/1"),
                rec("robustness/0", **own), rec("robustness/1", **slow)])
    assert (j.outcome, j.reward) == ("pass", 1.0)


def test_a_stdlib_module_the_harness_finds_is_the_models_missing_import():
    """ModuleNotFoundError of a standard module the harness's own look-up finds: the candidate
    hid or deleted it, a model failure, not infra.missing_dependency."""
    error = dict(status="error", etype="ModuleNotFoundError", detail="No module named 'json'")
    records = passing()
    records[1] = rec("hidden/0", **error, module_available=True)
    j = judged(records)
    assert (j.outcome, j.cause) == ("fail", "model.runtime_error")
    records[1] = rec("hidden/0", **error, module_available=False)
    j = judged(records)
    assert (j.outcome, j.cause) == ("dropped", "infra.missing_dependency")
