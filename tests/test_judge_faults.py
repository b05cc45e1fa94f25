"""Injected infrastructure faults never become rewards: they are re-run or dropped, and counted.

Each fault is real: processes killed with SIGKILL, a competing CPU load at the highest
priority on the job's CPU, a Docker engine stopped under a live backend.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from bus.messages import Job, Limits
from judging.config import JudgeConfig
from sandbox.config import SandboxConfig
from sandbox.plain import PlainBackend
from tests.conftest import until
from tests.support.judging import attempt, backend, humaneval, io_task, judge  # noqa: F401

SLOW_LOAD = io_task(visible=[([[1, 2]], 3)], hidden=[([[5]], 5)], reference="def f(xs):\n    return sum(xs)\n",
                    random_cases=0, timeout_s=10)
# staging: the solution takes 1.5 s to load, so a kill 0.6 s in lands mid-run
SLOW_CODE = "import time\ntime.sleep(1.5)\ndef f(xs):\n    return sum(xs)\n"


class KillingBackend:
    """Kills every process of its first `kills` jobs with SIGKILL, mid-run, from outside."""

    name = "subprocess"

    def __init__(self, root: Path, kills: int) -> None:
        self.inner = PlainBackend(SandboxConfig(backend="subprocess", workdir_root=str(root)))
        self.root, self.kills = root, kills

    async def run(self, job: Job):
        if self.kills <= 0:
            return await self.inner.run(job)
        self.kills -= 1
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._kill_soon)
            result = await self.inner.run(job)
            tg.cancel_scope.cancel()
        return result

    async def _kill_soon(self) -> None:
        await anyio.sleep(0.6)  # staging: the kill lands mid-run, inside SLOW_CODE's 1.5 s
        for pid in _pids_under(self.root):
            os.kill(pid, signal.SIGKILL)


def _pids_under(root: Path) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd").startswith(str(root)):
                    found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.bus
@pytest.mark.usefixtures("backend")
async def test_a_job_killed_mid_run_is_rerun_and_only_the_clean_run_counts(tmp_path):
    """The killed run is attributed to the infrastructure; the re-run's pass is the verdict."""
    [j] = await judge(KillingBackend(tmp_path, kills=1), [attempt(SLOW_LOAD, SLOW_CODE)])
    assert (j.judgement.outcome, j.judgement.reward, j.retries) == ("pass", 1.0, 1)
    assert j.infra_causes == ("infra.executor_killed",)


@pytest.mark.bus
@pytest.mark.usefixtures("backend")
async def test_a_job_killed_on_every_run_is_dropped_with_its_cause(tmp_path):
    """When every run is killed the attempt is dropped: no reward, not trainable, counted."""
    [j] = await judge(KillingBackend(tmp_path, kills=10), [attempt(SLOW_LOAD, SLOW_CODE)])
    verdict = j.verdict()
    assert (verdict.outcome, verdict.reward, verdict.trainable) == ("dropped", None, False)
    assert verdict.cause == "infra.executor_killed" and verdict.retries == JudgeConfig().max_retries
    assert "SIGKILL" in verdict.evidence


class StarvingBackend:
    """Runs its first `starved` jobs on CPU 0 at the lowest priority, beside busy loops at the
    highest priority pinned to the same CPU: a fast solution cannot finish in time."""

    name = "subprocess"

    def __init__(self, starved: int) -> None:
        self.inner = PlainBackend(SandboxConfig(backend="subprocess"))
        self.starved = starved

    async def run(self, job: Job):
        if self.starved <= 0:
            return await self.inner.run(job)
        self.starved -= 1
        hogs = [subprocess.Popen(["taskset", "-c", "0", "nice", "-n", "-20", sys.executable, "-c", "while True: pass"],
                                 start_new_session=True) for _ in range(3)]
        for hog in hogs:
            _top_priority_autogroup(hog.pid)
        try:
            await anyio.sleep(0.2)  # staging: the hogs get going on CPU 0 before the job does
            pinned = msgspec.structs.replace(job, command=["taskset", "-c", "0", "nice", "-n", "19", *job.command])
            return await self.inner.run(pinned)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()


def _top_priority_autogroup(pid: int) -> None:
    # With scheduler autogroups, nice only ranks tasks inside one session; a session's own
    # nice ranks it against the job's sessions.
    try:
        Path(f"/proc/{pid}/autogroup").write_text("-20")
    except OSError:
        pass  # no autogroups here: the task's own nice already ranks it


@pytest.mark.bus
@pytest.mark.usefixtures("backend")
async def test_cpu_starvation_is_not_a_timeout_and_a_quiet_rerun_decides():
    """A canonical solution starved by a competing load is re-run, then passes."""
    task = msgspec.structs.replace(humaneval()["HumanEval/53"], limits=Limits(timeout_s=2))
    [j] = await judge(StarvingBackend(starved=1), [attempt(task, task.verifier.reference)])
    assert j.infra_causes == ("infra.cpu_starvation",)
    assert (j.judgement.outcome, j.judgement.reward, j.retries) == ("pass", 1.0, 1)


@pytest.mark.bus
@pytest.mark.usefixtures("backend")
async def test_cpu_starvation_that_persists_is_dropped_never_punished():
    """Starved on every run, the attempt is dropped with the starvation as its cause."""
    task = msgspec.structs.replace(humaneval()["HumanEval/53"], limits=Limits(timeout_s=1.5))
    config = JudgeConfig(max_retries=1)
    [j] = await judge(StarvingBackend(starved=5), [attempt(task, task.verifier.reference)], config)
    assert (j.judgement.outcome, j.judgement.reward, j.judgement.cause) == ("dropped", None, "infra.cpu_starvation")
    assert j.retries == 1 and "cpu" in j.judgement.evidence


class PrivateDockerd:
    """A dockerd of this test's own (own socket, data and exec roots), so stopping it
    disturbs no one else's engine."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sock = root / "docker.sock"
        argv = [shutil.which("dockerd") or "/usr/sbin/dockerd", "--bridge=none", "--iptables=false",
                "--ip-masq=false", f"--data-root={root / 'data'}", f"--exec-root={root / 'exec'}",
                f"--pidfile={root / 'dockerd.pid'}", f"--host=unix://{self.sock}", "--log-level=error"]
        self.log = open(root / "dockerd.log", "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, start_new_session=True)

    async def wait_ready(self) -> bool:
        from sandbox.engine import answers

        ready = False

        async def answered_or_gone() -> bool:
            nonlocal ready
            if self.proc.poll() is not None:
                return True
            ready = await answers(f"unix://{self.sock}", timeout_s=2.0)
            return ready

        with contextlib.suppress(TimeoutError):
            await until(answered_or_gone, 60)
        return ready

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


@pytest.mark.bus
async def test_a_stopped_docker_engine_drops_the_attempt_without_a_reward():
    """The docker backend's engine stops under it: every run is a sandbox failure, dropped."""
    from aiodocker.exceptions import DockerError

    from sandbox.docker import DockerBackend

    root = Path(f"/tmp/whet-judge-dockerd-{os.getpid()}")
    root.mkdir(exist_ok=True)
    engine = PrivateDockerd(root)
    try:
        if not await engine.wait_ready():
            log = (root / "dockerd.log").read_text()[-1500:]
            if os.environ.get("CI"):
                pytest.fail(f"dockerd must start in CI:\n{log}")
            pytest.skip(f"dockerd cannot start on this machine:\n{log}")
        config = SandboxConfig(backend="docker", docker_host=f"unix://{engine.sock}", docker_start_engine=False)
        docker = await DockerBackend.open(config, slots=1, run_id=f"judge-test-{os.getpid()}")
        engine.stop()
        task = humaneval()["HumanEval/53"]
        try:
            [j] = await judge(docker, [attempt(task, task.verifier.reference)])
        finally:
            with contextlib.suppress(DockerError):  # its reaper cannot reach a stopped engine
                await docker.aclose()
    finally:
        engine.stop()
        shutil.rmtree(root, ignore_errors=True)
    assert (j.judgement.outcome, j.judgement.reward, j.judgement.cause) == ("dropped", None, "infra.sandbox")
    assert j.retries == JudgeConfig().max_retries and j.result.sandbox_failed
    assert "sandbox failed" in j.judgement.evidence


@pytest.mark.stack
async def test_the_executor_killed_mid_job_gives_no_reward_until_a_clean_rerun(make_stack, bus, backend):
    """kill -9 of the executor process while it runs a job: the request comes back to a fresh
    executor, and the one verdict is from that complete run; the kill is on record."""
    from bus import subjects
    from bus.messages import Event, Heartbeat, Verdict

    stack = make_stack("[supervisor]\nrestart_backoff_s = 0.2\n"
                       "[actors.count]\njudge = 1\nexecutor = 1\n"
                       '[executor.sandbox]\nbackend = "subprocess"\n')
    stack.start()
    await bus.publish(subjects.ATTEMPTS, attempt(SLOW_LOAD, SLOW_CODE, attempt_id="k1.0"), msg_id="k1.0")
    victim = None

    async def executor_running_the_job() -> bool:
        """Its own executor's job: other harnesses may run on this machine."""
        nonlocal victim
        beats = await bus.kv_items(subjects.BUCKET_ACTORS, Heartbeat, prefix="executor.")
        victim = next((b.pid for b in beats.values()), None)
        return victim is not None and any("harness.py" in _cmdline(pid) for pid in _descendants(victim))

    await until(executor_running_the_job, 60, "the executor's harness.py running")
    os.kill(victim, signal.SIGKILL)
    with anyio.fail_after(90):
        async for _, verdict, _ in bus.replay(subjects.STREAM_VERDICTS, f"{subjects.VERDICTS}.>", Verdict):
            break
    assert (verdict.verdict_id, verdict.outcome, verdict.reward) == ("k1.0", "pass", 1.0)

    async def completed() -> tuple[list[Event], list[Event]]:
        events = [e async for _, e, _ in bus.replay(subjects.STREAM_EVENTS, subjects.event_filter(),
                                                    Event, follow=False)]
        return events, [e for e in events if e.event == "exec.completed"
                        and e.fields.get("request_id") == "k1.0/t1/r0"]

    async def rerun_completed() -> bool:
        return bool((await completed())[1])

    # events travel apart from verdicts: they may land later
    await until(rerun_completed, 30, "exec.completed of k1.0/t1/r0 on the events stream")
    await anyio.sleep(1.0)  # staging: a second exec.completed, were there one, has time to land
    events, done = await completed()
    assert any(e.event == "actor.exited" and e.fields.get("kind") == "executor" for e in events)
    assert len(done) == 1


def _descendants(root: int) -> list[int]:
    """Every process below `root`, from the parent ids in /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.bus
@pytest.mark.usefixtures("backend")
async def test_a_module_the_runtime_owes_is_missing_so_the_attempt_is_dropped():
    """A task that requires a module the runtime lacks is the environment's fault, not the model's."""
    task = io_task([([[1, 2]], 3)], [([[4]], 4)], "def f(xs):\n    return sum(xs)\n",
                   requires="whet_module_nobody_installed")
    [j] = await judge(backend_plain(), [attempt(task, "def f(xs):\n    return sum(xs)\n")])
    assert (j.judgement.outcome, j.judgement.reward, j.judgement.cause) == ("dropped", None, "infra.missing_dependency")
    assert "whet_module_nobody_installed" in j.judgement.evidence and j.retries == JudgeConfig().max_retries


def backend_plain() -> PlainBackend:
    return PlainBackend(SandboxConfig(backend="subprocess"))
