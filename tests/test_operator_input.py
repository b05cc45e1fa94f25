"""Bad input from an operator, verb by verb: the exact line each case prints and its exit status.

Each case runs the real `whet` CLI in a process, as a user would; nothing is mocked. The
cases a stack or a sandbox needs are in the bus tier, the others in the unit tier.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import json

import anyio
import msgspec
import pytest

from bus import subjects
from bus.messages import ScaleTarget
from runtime.config import RunConfig, dump
from runtime.stack import pidfile
from tests.support.judging import io_task
from tests.support.sandbox_fixtures import built_envs  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


def whet(*args: str, cwd: Path = ROOT, timeout_s: float = 120.0, **extra_env: str
         ) -> subprocess.CompletedProcess:
    """The `whet` CLI with `args`, run from `cwd` (with `extra_env` set)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra_env}
    env.pop("WHET_NATS_URL", None)
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], cwd=cwd, env=env,
                          text=True, capture_output=True, timeout=timeout_s)


def one_line(result: subprocess.CompletedProcess) -> str:
    """The single line `result` printed on stderr (the test fails if there were more)."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def stopped_run(tmp_path: Path, cfg: RunConfig = RunConfig(), url: str = "nats://127.0.0.1:1") -> Path:
    """A run folder as `whet up` leaves it, whose server (at `url`) is not running."""
    run = tmp_path / "runs" / "r-1"
    run.mkdir(parents=True)
    (run / "config.resolved.json").write_bytes(dump(cfg))
    (run / "nats.url").write_text(url + "\n")
    return run


SCALE_CASES = [
    (["exectuor=2"], "whet: scale: unknown actor kind 'exectuor'; did you mean 'executor'? known "
     "kinds: evaluator, executor, generator, judge, learner, learner_rank, monitor, sampler"),
    (["executor=-1"], "whet: scale: 'executor=-1': expected KIND=N with N a whole number, e.g. executor=4"),
    (["executor=two"], "whet: scale: 'executor=two': expected KIND=N with N a whole number, e.g. executor=4"),
    (["executor=²"], "whet: scale: 'executor=²': expected KIND=N with N a whole number, e.g. executor=4"),
    (["=2"], "whet: scale: '=2': expected KIND=N with N a whole number, e.g. executor=4"),
    (["executor=65"], "whet: scale: 'executor=65': at most 64 instances of a kind"),
    (["executor=2", "executor=3"], "whet: scale: 'executor' is given twice; give each kind once"),
    (["executor=2", "probe=1"], "whet: scale: unknown actor kind 'probe'; known kinds: evaluator, "
     "executor, generator, judge, learner, learner_rank, monitor, sampler"),
]


@pytest.mark.unit
@pytest.mark.parametrize("args, line", SCALE_CASES, ids=[" ".join(a) for a, _ in SCALE_CASES])
def test_scale_refuses_a_bad_kind_or_count_before_connecting(tmp_path, args, line):
    """A typo in `whet scale` is one line and exit 2, said before the (stopped) server is tried."""
    run = stopped_run(tmp_path)
    result = whet("scale", *args, "--run", str(run), "--wait", "0", timeout_s=8)
    assert (result.returncode, one_line(result)) == (2, line)


@pytest.mark.unit
def test_scale_knows_the_run_configs_own_kinds(tmp_path):
    """A kind the run's config adds (`[actors] target`) is known; its typo is named with it."""
    cfg = msgspec.convert({"actors": {"target": {"probe": "tests.support.probe_actor:run"}}}, RunConfig)
    run = stopped_run(tmp_path, cfg)
    result = whet("scale", "prbe=3", "--run", str(run), "--wait", "0", timeout_s=8)
    assert result.returncode == 2
    assert "unknown actor kind 'prbe'; did you mean 'probe'?" in one_line(result)


@pytest.mark.bus
async def test_scale_without_a_run_folder_writes_nothing_for_an_unknown_kind(bus, nats_server, tmp_path):
    """With only a URL, an unknown kind (none beats on the bus either) leaves KV untouched."""
    result = await anyio.to_thread.run_sync(lambda: whet(
        "scale", "exectuor=2", "--url", nats_server.url, "--wait", "0", cwd=tmp_path))
    assert result.returncode == 2
    assert "unknown actor kind 'exectuor'; did you mean 'executor'?" in result.stderr.splitlines()[-1]
    assert await bus.kv_items(subjects.BUCKET_RUN, ScaleTarget, prefix="scale.") == {}
    fine = await anyio.to_thread.run_sync(lambda: whet(
        "scale", "executor=2", "--url", nats_server.url, "--wait", "0", cwd=tmp_path))
    assert fine.returncode == 0, fine.stderr
    targets = await bus.kv_items(subjects.BUCKET_RUN, ScaleTarget, prefix="scale.")
    assert [(t.kind, t.count) for t in targets.values()] == [("executor", 2)]


SUM = io_task([([[1, 2]], 3)], [([[4]], 4)], "def f(xs):\n    return sum(xs)\n")
GOOD = json.dumps({"task_id": "test/f", "completion": "def f(xs):\n    return sum(xs)\n"}) + "\n"
TASKS = msgspec.json.encode(SUM).decode() + "\n"
FUTURE = TASKS.replace("whet.task.v1", "whet.task.v2")


def files(tmp_path: Path, **contents: str | bytes) -> dict[str, str]:
    """Each named content written to its own file; the paths by name."""
    out = {}
    for name, content in contents.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        out[name] = str(path)
    return out


JUDGE_REFUSED = [  # (tasks, samples, the one line, after the file's path)
    ("", GOOD, ": the file is empty; expected one JSON record per line"),
    ("\n  \n", GOOD, ": the file is empty; expected one JSON record per line"),
    (b"\x1f\x00\xff\xfe" * 10, GOOD, ": not a text file (a NUL byte at offset 1); expected JSON lines in UTF-8"),
    (b"\xff\xfe{}\n", GOOD, ": not UTF-8 text (at byte 0); expected JSON lines in UTF-8"),
    (TASKS, "", ": the file is empty; expected one JSON record per line"),
    (TASKS, b"\x00" * 40, ": not a text file (a NUL byte at offset 0); expected JSON lines in UTF-8"),
]


@pytest.mark.unit
@pytest.mark.parametrize("tasks, samples, line", JUDGE_REFUSED)
def test_judge_refuses_an_empty_or_binary_file_in_one_line(tmp_path, tasks, samples, line):
    """An empty or binary tasks or samples file is one line naming it, and exit 2."""
    paths = files(tmp_path, tasks=tasks, samples=samples)
    result = whet("judge", paths["tasks"], paths["samples"])
    bad = paths["samples"] if tasks == TASKS else paths["tasks"]
    assert (result.returncode, one_line(result), result.stdout) == (2, f"whet: {bad}{line}", "")


@pytest.mark.unit
def test_judge_with_no_task_it_can_read_names_each_line_and_exits_2(tmp_path):
    """A tasks file of a future schema version: its line is named, then nothing is judged."""
    paths = files(tmp_path, tasks=FUTURE, samples=GOOD)
    result = whet("judge", paths["tasks"], paths["samples"])
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"whet: skipped {paths['tasks']}:1: t: 'whet.task.v2' is a version this whetstone does not "
        "read (it reads whet.task.v1); upgrade whetstone, or write it as whet.task.v1",
        f"whet: judge: no task in {paths['tasks']} could be read; nothing to judge"]


@pytest.mark.bus
@pytest.mark.usefixtures("built_envs")
def test_judge_judges_the_rest_of_a_file_with_skipped_lines_and_exits_1(tmp_path):
    """Unknown task ids, broken lines and a future schema version are skipped and named; the
    rest is judged, and the exit status (1) and the summary's count tell a script so."""
    other = TASKS.replace('"test/f"', '"test/h"')
    paths = files(tmp_path, tasks=TASKS + other.replace("whet.task.v1", "whet.task.v2"),
                  samples=GOOD + "{broken\n" + GOOD.replace("test/f", "test/nope")
                  + GOOD.replace("test/f", "test/h"))
    result = whet("judge", paths["tasks"], paths["samples"])
    assert result.returncode == 1, result.stderr
    assert [line.split()[:2] for line in result.stdout.splitlines()] == [["test/f#1", "pass"]]
    tasks, samples = paths["tasks"], paths["samples"]
    assert result.stderr.splitlines() == [
        f"whet: skipped {tasks}:2: t: 'whet.task.v2' is a version this whetstone does not read "
        "(it reads whet.task.v1); upgrade whetstone, or write it as whet.task.v1",
        f"whet: skipped {samples}:2: not JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)",
        f"whet: skipped {samples}:3: task_id: 'test/nope' is not in the tasks file",
        f"whet: skipped {samples}:4: task_id: 'test/h' is not in the tasks file",
        "judged 1: pass 1; re-runs 0; skipped lines 4"]


TASKS_CHECK_CASES = [  # (file content, exit status, the line on stderr after the path)
    ("", 2, ": the file is empty; expected one JSON record per line"),
    (b"\x00\x01binary", 2, ": not a text file (a NUL byte at offset 0); expected JSON lines in UTF-8"),
    ('{"task_id": "' + "x" * (2 << 20) + '"}\n', 1, ":1: a line of 2.0 MiB, over the 1 MiB a line may hold"),
]


@pytest.mark.unit
@pytest.mark.parametrize("content, status, line", TASKS_CHECK_CASES)
def test_tasks_check_refuses_an_empty_file_and_an_oversized_line(tmp_path, content, status, line):
    """`whet tasks check`: an empty or binary file is one line and exit 2; a line over the
    limit is named without being parsed, and the file exits 1."""
    path = files(tmp_path, tasks=content)["tasks"]
    result = whet("tasks", "check", path)
    assert result.returncode == status, result.stderr
    lines = result.stderr.splitlines()
    if status == 2:
        assert one_line(result) == f"whet: {path}{line}"
    else:
        assert lines == [f"whet: skipped {path}{line}",
                         "0 tasks checked, 1 bad lines; accepted 0, rejected: none"]


@pytest.mark.unit
@pytest.mark.parametrize("args, line", [
    (["--env", "pyton", "--", "python3", "-c", "pass"],
     "whet: exec: --env 'pyton': unknown runtime; expected one of ['python', 'shell']"),
    (["--stdin", "/nonexistent/in.txt", "--", "python3", "-c", "pass"],
     "whet: exec: --stdin /nonexistent/in.txt: cannot read: No such file or directory"),
])
def test_exec_refuses_bad_input_in_one_line(args, line):
    """An unknown runtime or a missing stdin file is one line and exit 2; nothing runs."""
    result = whet("exec", *args)
    assert (result.returncode, one_line(result), result.stdout) == (2, line, "")


@pytest.mark.bus
@pytest.mark.usefixtures("built_envs")
@pytest.mark.parametrize("command, status, line", [
    (["python3", "-c", "import sys; sys.exit(3)"], 3, ""),
    (["nosuchprogram"], 127, ""),
    (["python3", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], 143,
     "whet exec: the program was killed (signal 15)"),
    (["python3", "-c", "pass"], 0, ""),
])
def test_exec_exits_with_the_programs_status(command, status, line):
    """`whet exec` exits as the program did (128 + a signal that killed it), with the result
    on stdout."""
    result = whet("exec", "--", *command)
    assert result.returncode == status, result.stderr
    assert json.loads(result.stdout)["backend"] == "local"
    assert result.stderr.strip() == line


@pytest.mark.bus
def test_exec_says_when_the_sandbox_failed_not_the_program(tmp_path):
    """A sandbox that cannot run the job (its runtime is not built) exits 125 and says so."""
    result = whet("exec", "--", "python3", "-c", "pass", WHET_ENVS_DIR=str(tmp_path / "none"))
    assert result.returncode == 125
    assert json.loads(result.stdout)["sandbox_failed"] is True
    assert one_line(result).startswith("whet exec: the sandbox failed, not the program: runtime "
                                       "python-")


@pytest.fixture
def stranger():
    """A live process whetstone did not start (a `sleep`), killed after the test."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


def stale_files(run: Path, stranger: subprocess.Popen) -> dict[str, str]:
    """Pid files naming `stranger` that must not make `whet down` signal it, by what is wrong."""
    start = pidfile.start_time(stranger.pid)
    record = lambda **kw: msgspec.json.encode(  # noqa: E731
        {"pid": stranger.pid, "start": start, "run_id": run.name, **kw}).decode()
    return {
        "another process now": record(start=start - 1),
        "written for run 'r-0'": record(run_id="r-0"),
        "does not say which process wrote it": f"{stranger.pid}\n",
    }


@pytest.mark.unit
@pytest.mark.parametrize("what", ["another process now", "written for run 'r-0'",
                                  "does not say which process wrote it"])
def test_down_never_signals_a_stranger_named_by_a_stale_pid_file(tmp_path, stranger, what):
    """A pid file naming a live process that is not this run's supervisor (another start
    time, another run, or no identity at all): `whet down` says it was stale, removes it
    (and the stale `ready`), and the process lives on."""
    run = stopped_run(tmp_path)
    (run / "supervisor.pid").write_text(stale_files(run, stranger)[what])
    (run / "ready").write_text("1\n")
    result = whet("down", "--run", str(run), timeout_s=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("run r-1 is not running: its supervisor.pid was stale (")
    assert what in result.stdout and result.stdout.endswith("removed it and signalled nothing\n")
    assert stranger.poll() is None
    assert not (run / "supervisor.pid").exists() and not (run / "ready").exists()


@pytest.mark.unit
def test_down_stops_the_process_its_pid_file_proves_is_the_runs(tmp_path, stranger):
    """A pid file with the process's own start time and the run's id is believed: that
    process gets SIGTERM and `whet down` waits until it is gone."""
    run = stopped_run(tmp_path)
    record = pidfile.PidRecord(pid=stranger.pid, start=pidfile.start_time(stranger.pid), run_id=run.name)
    (run / "supervisor.pid").write_bytes(msgspec.json.encode(record))
    result = whet("down", "--run", str(run), timeout_s=30)
    assert (result.returncode, result.stdout) == (0, "run r-1 stopped\n"), result.stderr
    assert stranger.wait(timeout=5) == -15


@pytest.mark.unit
def test_a_pid_file_written_by_a_process_names_it_until_it_exits(tmp_path):
    """`pidfile.write` records this process; `holder` finds it, and calls it stale for
    another run."""
    path = tmp_path / "supervisor.pid"
    pidfile.write(path, "r-1")
    assert pidfile.holder(path, "r-1").record.pid == os.getpid()
    assert "written for run 'r-1'" in pidfile.holder(path, "r-2").stale
    assert pidfile.holder(tmp_path / "none.pid", "r-1") == pidfile.Holder()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.unit
def test_status_against_a_stopped_server_is_one_line():
    """No server at the URL: one line naming it and the last connect error, exit 2 (it was
    one warning per reconnect attempt, then the error)."""
    url = f"nats://127.0.0.1:{free_port()}"
    result = whet("status", "--url", url, timeout_s=60)
    assert result.returncode == 2 and result.stdout == ""
    assert one_line(result) == (f"whet: no NATS server answered at {url} within 10 s (last error: "
                                f"[Errno 111] Connect call failed ('127.0.0.1', {url.rsplit(':', 1)[1]}))")


@pytest.mark.unit
def test_status_of_a_stopped_run_says_so_in_one_line_without_connecting(tmp_path):
    """A run whose supervisor (and so its embedded server) is gone: one line, exit 1, at once."""
    run = stopped_run(tmp_path)
    result = whet("status", "--run", str(run), timeout_s=8)
    assert (result.returncode, result.stderr) == (1, "")
    assert result.stdout == ("run r-1 is not running (its stack and embedded server stopped); "
                             "start one with 'whet up'\n")


@pytest.mark.unit
def test_a_config_that_is_not_utf8_is_one_line_naming_the_line(tmp_path):
    """A config saved in Latin-1 is one line naming the file, the byte and its line, and the
    fix; exit 2 (it was a UnicodeDecodeError traceback)."""
    config = tmp_path / "latin1.toml"
    config.write_bytes(b'extends = "' + str(ROOT / "configs" / "default.toml").encode()
                       + b'"\n[run]\nname = "caf\xe9"\n')
    r = whet("doctor", "--config", str(config))
    assert r.returncode == 2
    assert one_line(r) == (f"whet: {config}: not UTF-8 text (byte 0xe9 on line 3): TOML files "
                           "are UTF-8; save it as UTF-8")


BWRAP_LINE = ("whet: bubblewrap is not installed: the local sandbox backend runs bwrap, which is "
              "not on PATH (fix: apt-get install -y --no-install-recommends bubblewrap)")


@pytest.mark.unit
@pytest.mark.parametrize("verb", ["tasks check", "judge"])
def test_a_verb_that_needs_bubblewrap_without_it_is_one_line_and_exit_2(tmp_path, verb):
    """`whet tasks check` and `whet judge` with bubblewrap off PATH print the missing tool and
    its install command on one line, exit 2 (they raised a RuntimeError traceback)."""
    task = SUM
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(msgspec.json.encode(task) + b"\n")
    attempts = tmp_path / "attempts.jsonl"
    attempts.write_text(json.dumps({"task_id": task.task_id, "completion": "print(1)"}) + "\n")
    args = ["tasks", "check", str(tasks)] if verb == "tasks check" else ["judge", str(tasks), str(attempts)]
    r = whet(*args, PATH=str(Path(sys.executable).parent))
    assert r.returncode == 2 and one_line(r) == BWRAP_LINE
