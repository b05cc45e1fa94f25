"""Crash loops end with the cause; crashes after readiness keep restarting.

A kind whose processes crash `supervisor.crash_loop_limit` times in a row before they are
ready stops the foreground `whet up` with exit 1 and its last exception line, and `whet
status` shows it failing with that cause (from the bus, and from the run directory once the
stack is gone). Each stack runs as a separate `whet up` process against the test's server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import anyio
import pytest

from runtime.cli import stack_status as status_mod
from runtime.stack import crash_cause
from tests.conftest import ROOT
from tests.test_runtime import PROBE, ready_probes, wait_for


def with_kind(config: str, kind: str, target: str) -> str:
    """`config` with one instance of an extra kind run by `target`."""
    return (config.replace("[actors.count]\n", f"[actors.count]\n{kind} = 1\n")
            .replace("[actors.target]\n", f'[actors.target]\n{kind} = "{target}"\n'))


# Its module imports (preflight resolves it); its `run` fails on every start.
BROKEN = with_kind(PROBE.format(n=1), "broken", "tests.support.broken_actor:run")
CAUSE = "ModuleNotFoundError: No module named 'no'"


@pytest.mark.stack
async def test_a_kind_that_never_gets_ready_stops_the_stack_with_its_cause(make_stack, tmp_path):
    """A bad entry point crashes 3 times before readiness: `whet up` exits 1 with the kind and
    the exception line on the terminal; `whet status` shows it failing, with that cause."""
    stack = make_stack(BROKEN)
    stack.start()
    code = await anyio.to_thread.run_sync(lambda: stack.proc.wait(timeout=120))
    out = (tmp_path / "stack.out").read_text()
    assert code == 1, out[-3000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith("whet: actor kind 'broken' failed 3 times in a row before it was ready: ")
    assert CAUSE in last and "broken-1.out" in last
    crash_looped = [json.loads(line) for line in out.splitlines()
                    if '"actor.crash_looped"' in line]
    assert crash_looped and crash_looped[0]["cause"] == CAUSE

    on_bus = stack.whet("status", "--json")
    assert on_bus.returncode == 0, on_bus.stderr
    (failing,) = json.loads(on_bus.stdout)["failing"]
    assert (failing["kind"], failing["failures"], failing["cause"]) == ("broken", 3, CAUSE)

    env = {k: v for k, v in os.environ.items() if k != "WHET_NATS_URL"}
    gone = subprocess.run([sys.executable, "-m", "runtime.cli", "status", "--run",
                           str(stack.run_dir)], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                          text=True, capture_output=True, timeout=60)
    assert gone.returncode == 1
    assert "is not running" in gone.stdout and "failing broken" in gone.stdout
    assert CAUSE in gone.stdout


@pytest.mark.stack
async def test_crashes_before_readiness_under_the_limit_do_not_stop_the_stack(bus, make_stack):
    """A kind that crashes twice before it is ready, then gets ready, keeps the stack up."""
    stack = make_stack(with_kind(PROBE.format(n=1), "flaky", "tests.support.flaky_actor:run"))
    stack.start()

    async def flaky_ready():
        snap = await status_mod.gather(bus)
        return snap if snap.live("flaky") == 1 else None

    snap = await wait_for(flaky_ready, 60, "flaky ready")
    assert (stack.run_dir / "flaky.starts").read_text() == "3"
    assert snap.failing == [] and stack.proc.poll() is None


@pytest.mark.stack
async def test_crashes_after_readiness_keep_restarting_with_backoff(bus, make_stack):
    """A ready actor killed more times in a row than the crash-loop limit is restarted each
    time, and the stack stays up."""
    stack = make_stack(PROBE.format(n=1))
    stack.start()
    for _ in range(4):  # the limit is 3
        (probe,) = (await ready_probes(bus, 1)).actors
        os.kill(probe.pid, signal.SIGKILL)

        async def replaced(pid=probe.pid):
            snap = await status_mod.gather(bus)
            return any(a.kind == "probe" and a.state == "ready" and a.pid != pid
                       for a in snap.actors)

        await wait_for(replaced, 60, "a new ready probe")
    assert stack.proc.poll() is None
    assert (await status_mod.gather(bus)).failing == []


@pytest.mark.unit
def test_the_cause_is_the_last_exception_line_of_this_process(tmp_path):
    """The logged exception of the process started at `since` wins; else the last traceback
    written to its output after its offset; older processes' crashes do not count."""
    logs = tmp_path
    old = {"ts": 10.0, "fields": {"exception": "Traceback ...\nValueError: old"}}
    (logs / "k-1.jsonl").write_text(json.dumps(old) + "\n")
    earlier = "Traceback (most recent call last):\n  File x\nKeyError: 'earlier'\n"
    (logs / "k-1.out").write_text(earlier + "Traceback (most recent call last):\n"
                                  "  File \"m.py\", line 1\n    import no\n"
                                  "ModuleNotFoundError: No module named 'no'\n")
    assert crash_cause.cause(logs, "k-1", since=20.0) == CAUSE
    assert crash_cause.cause(logs, "k-1", since=5.0) == "ValueError: old"
    offset = len(earlier.encode()) + 200
    assert crash_cause.cause(logs, "k-1", since=20.0, out_offset=offset) == ""


@pytest.mark.unit
def test_the_cause_of_an_exception_group_is_its_innermost_exception_line(tmp_path):
    """An actor's task group wraps its crash in an ExceptionGroup, whose formatted text ends
    in a rule line: the cause is the sub-exception's own line, from the event log and from
    the captured output alike; other lines are left as written."""
    def crash():
        async def fail():
            raise ModuleNotFoundError("No module named 'no'")

        async def main():
            async with anyio.create_task_group() as tg:
                tg.start_soon(fail)
        anyio.run(main)

    try:
        crash()
    except BaseException:  # noqa: BLE001 - the group itself is what the actor logs
        import traceback
        text = traceback.format_exc()
    assert text.rstrip().splitlines()[-1].strip().startswith("+---")
    record = {"ts": 30.0, "fields": {"exception": text}}
    (tmp_path / "k-1.jsonl").write_text(json.dumps(record) + "\n")
    (tmp_path / "k-2.out").write_text(text)
    assert crash_cause.cause(tmp_path, "k-1", since=20.0) == CAUSE
    assert crash_cause.cause(tmp_path, "k-2", since=20.0) == CAUSE
    assert [crash_cause.unboxed(line) for line in ("-1", "KeyError: '+'", "a | b")] == [
        "-1", "KeyError: '+'", "a | b"]
