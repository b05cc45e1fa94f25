"""The candidate cannot reach the trusted parts: the reference and the harness's report survive it.

Each attack is a real attempt judged through the local backend (bubblewrap, a cgroup per
slot): a child that lowers the limits and priority of every process it can name, a forged
line on the worker's answer pipe, a fork bomb left behind. The reference must still run,
the report must end, and the attempt's verdict must be its own (never dropped).
"""

from __future__ import annotations

import json
import os

import anyio
import pytest

from sandbox import open_backend
from sandbox.config import SandboxConfig
from tests.support.judging import attempt, io_task, judge
from tests.support.sandbox_fixtures import built_envs  # noqa: F401

pytestmark = pytest.mark.bus

SUM = io_task(visible=[([[1, 2, 3]], 6), ([[4, 5]], 9)],
              hidden=[([[10, 20]], 30), ([[7]], 7), ([[2, 2, 2, 2]], 8)],
              reference="def f(xs):\n    return sum(xs)\n")

TABLE = "def f(xs):\n    return {(1, 2, 3): 6, (4, 5): 9}.get(tuple(xs), 0)\n"
"Answers the visible examples only: every other input is wrong."

SABOTAGE = """import os, resource, time
def _sabotage(worker):
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    me, end = os.getpid(), time.time() + 20
    while time.time() < end:
        for pid in range(1, me + 300):
            if pid in (me, worker):
                continue
            try:
                resource.prlimit(pid, resource.RLIMIT_AS, (16 << 20, 16 << 20))
                resource.prlimit(pid, resource.RLIMIT_NPROC, (1, 1))
                os.setpriority(os.PRIO_PROCESS, pid, 19)
            except OSError:
                pass
    os._exit(0)
_sabotage(os.getpid())
time.sleep(0.2)  # staging: the saboteur gets to work before the answers
""" + TABLE

FORK_BOMB = """import os, signal, time
def _bomb():
    if os.fork():
        return
    os.setsid()
    while True:
        try:
            if os.fork() == 0:
                signal.pause()
                os._exit(0)
        except OSError:
            break
    time.sleep(30)  # staging: the bomb's children outlive the attempt
    os._exit(0)
_bomb()
time.sleep(0.3)  # staging: the bomb goes off before the answers
""" + TABLE

FORGED = {
    "not a record": "import os, sys\nFD = int(sys.argv[3])\ndef f(xs):\n    os.write(FD, b'[0]\\n')\n    return sum(xs)\n",
    "numbered right": (
        "import json, os, sys\nFD = int(sys.argv[3])\n"
        "def f(xs):\n    req = sys._getframe(1).f_locals['req']\n"
        "    os.write(FD, json.dumps({'seq': req['seq'], 'ok': True, 'value': sum(xs), 'audit': [], 'patched': []}).encode() + b'\\n')\n"
        "    return sum(xs)\n"),
    "after the last answer": (
        "import os, sys, threading, time\nFD = int(sys.argv[3])\n"
        "def _late():\n    time.sleep(0.05)  # staging: written after the last answer\n    os.write(FD, b'{\"seq\": 999}\\n')\n"
        "def f(xs):\n    threading.Thread(target=_late).start()\n    return sum(xs)\n"),
}


@pytest.fixture
async def local(built_envs):  # noqa: F811
    opened = await open_backend(SandboxConfig(backend="local", warm_python=False), slots=2,
                                run_id=f"iso-test-{os.getpid()}")
    try:
        yield opened
    finally:
        with anyio.CancelScope(shield=True):
            await opened.aclose()


def records(judged) -> list[dict]:
    return [json.loads(line) for line in judged.result.report.splitlines() if line.strip()]


def robustness(judged) -> list[dict]:
    return [r for r in records(judged) if r.get("k") == "test" and r.get("layer") == "robustness"]


async def test_a_child_lowering_every_limit_it_can_name_does_not_stop_the_reference(local):
    """The reference still runs every robustness input, so answering from a table fails there."""
    [j] = await judge(local, [attempt(SUM, SABOTAGE)])
    tests = robustness(j)
    assert tests and not [t for t in tests if t["status"] == "invalid"], tests
    assert any(t["status"] != "ok" or t.get("value") != t.get("reference") for t in tests)
    assert j.judgement.outcome != "dropped" and j.judgement.reward < 1.0, j.judgement.evidence
    assert {"k": "isolation", "candidate": "pidns"} in records(j)


async def test_a_fork_bomb_left_behind_does_not_stop_the_reference(local):
    """A child that forks until the limit and holds every process leaves room for the reference."""
    [j] = await judge(local, [attempt(SUM, FORK_BOMB)])
    tests = robustness(j)
    assert tests and not [t for t in tests if t["status"] == "invalid"], (tests, j.judgement.evidence)
    assert j.judgement.outcome != "dropped" and j.judgement.reward < 1.0, j.judgement.evidence
    assert not [r for r in records(j) if r.get("k") in ("infra", "crash")]


@pytest.mark.parametrize("how", list(FORGED))
async def test_a_forged_answer_line_is_the_candidates_failure_and_the_report_ends(local, how):
    """Whatever the candidate writes on its answer pipe, the harness writes `end`, the verdict
    is the attempt's own, and a forgery the harness read is on record."""
    [j] = await judge(local, [attempt(SUM, FORGED[how])])
    recs = records(j)
    assert recs and recs[-1]["k"] == "end", recs[-3:]
    assert not [r for r in recs if r.get("k") == "crash"]
    forged = [r for r in recs if r.get("k") == "test" and r.get("forged")]
    late = [e for r in recs if r.get("k") == "audit" for e in r["events"] if e.startswith("report_fd: forged")]
    if how == "after the last answer" and not (forged or late):
        # The line came after the harness closed the pipe: never read, so it changed nothing,
        # and the (correct) function keeps its own verdict.
        assert j.judgement.outcome == "pass", (j.judgement.cause, j.judgement.evidence)
        return
    assert j.judgement.outcome in ("hack", "fail"), (j.judgement.cause, j.judgement.evidence)
    assert forged or late, recs


async def test_an_import_error_says_whether_the_runtime_has_the_module(local):
    """The harness, not the candidate, says whether a module the candidate failed to import exists."""
    code = ("def f(xs):\n    if len(xs) > 2:\n        import json.nonexistent_part\n"
            "    import no_such_module_anywhere\n")
    [j] = await judge(local, [attempt(SUM, code)])
    errors = {r["id"]: r for r in records(j) if r.get("k") == "test" and r.get("etype") in ("ModuleNotFoundError", "ImportError")}
    assert errors["visible/0"]["module_available"] is True  # json exists; its missing part is the model's
    assert errors["visible/1"]["module_available"] is False


async def test_a_reference_that_cannot_load_is_the_judges_fault_not_a_dropped_layer(local):
    """After the reclaim and one retry, the harness says the reference failed (infra), and ends."""
    broken = io_task(visible=[([[1, 2]], 3)], hidden=[([[5]], 5)],
                     reference="import no_such_module_anywhere\ndef f(xs):\n    return sum(xs)\n")
    [j] = await judge(local, [attempt(broken, TABLE)])
    recs = records(j)
    assert [r["what"] for r in recs if r.get("k") == "infra"] == ["reference"], recs
    assert recs[-1]["k"] == "end"
    assert not [t for t in robustness(j) if t["status"] == "invalid"]
