"""Hostile jobs against every isolating backend: each is contained, the host is unchanged,
and the same backend serves the next job normally."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import textwrap
import threading
from pathlib import Path

import pytest

from bus.messages import Job, Limits
from tests.conftest import until_sync
from tests.support.sandbox_fixtures import backend, built_envs, docker_engine  # noqa: F401

pytestmark = pytest.mark.bus

UID_BASE = 64000
LIMITS = Limits(timeout_s=8, cpu_s=8, memory_mb=256, pids=32, disk_mb=32, output_bytes=4096)


def py(code: str, **kw) -> Job:
    return Job(command=["python3", "-c", textwrap.dedent(code)], limits=kw.pop("limits", LIMITS), **kw)


def slot_processes(backend, grace_s: float = 1.0) -> list[str]:
    """Live host processes of `backend`'s jobs: a slot uid, inside the backend's cgroups
    (a job cannot leave them). There must be none between jobs. Other executors on this
    host (other test runs) have other cgroups; dead processes (zombies, exiting) do not count.
    """
    found: list[str] = []

    def none_left() -> bool:
        found.clear()
        for entry in Path("/proc").iterdir():
            try:
                status = (entry / "status").read_text()
                uid = int(status.split("\nUid:")[1].split()[0])
                state = status.split("\nState:")[1].split()[0]
                mine = f"/{backend.group}/" in (entry / "cgroup").read_text()
                if UID_BASE <= uid < UID_BASE + 100 and state not in ("Z", "X") and mine:
                    found.append(f"{entry.name}:{state}:{(entry / 'cmdline').read_bytes()[:80]!r}")
            except (OSError, IndexError, ValueError):
                pass
        return not found

    with contextlib.suppress(TimeoutError):  # what is left after the grace is the answer
        until_sync(none_left, grace_s)
    return found


def disk_free_mb() -> float:
    st = os.statvfs("/")
    return st.f_bavail * st.f_frsize / 2**20


async def still_serves(backend) -> None:
    """The backend runs an ordinary job correctly after the attack."""
    result = await backend.run(py("print(6 * 7)"))
    assert (result.status, result.stdout.strip()) == ("ok", "42"), result
    assert slot_processes(backend) == []


async def test_fork_bomb_is_contained(backend):
    """A fork bomb hits the pids limit, and nothing of it survives the job."""
    counted = await backend.run(py("""
        import os, time
        n = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(30); os._exit(0)  # staging: each child lives on
                n += 1
        except OSError:
            print(n)
    """))
    assert counted.status == "ok", counted
    assert int(counted.stdout) < LIMITS.pids
    bomb = await backend.run(Job(command=["bash", "-c", ":(){ :|:& };:; sleep 2"], limits=LIMITS))
    # Its "fork: retry" complaints may flood stderr first.
    assert bomb.status in ("ok", "nonzero_exit", "timeout", "output_limit"), bomb
    assert bomb.wall_s < LIMITS.timeout_s + 3
    await still_serves(backend)


async def test_8gib_allocation_is_killed_as_oom(backend):
    """Allocating 8 GiB ends as 'oom' at the memory limit, not on the host."""
    result = await backend.run(py("x = bytearray(8 * 1024**3); print('allocated')"))
    assert result.status == "oom", result
    assert "allocated" not in result.stdout
    assert result.peak_memory_mb == 0 or result.peak_memory_mb <= LIMITS.memory_mb * 1.1
    await still_serves(backend)


async def test_cpu_spin_times_out_with_cpu_accounted(backend):
    """A busy loop ends as 'timeout' at its CPU limit, and its CPU seconds are reported."""
    limits = Limits(timeout_s=6, cpu_s=1.5, memory_mb=256)
    result = await backend.run(py("while True: pass", limits=limits))
    assert result.status == "timeout", result
    assert result.cpu_s >= 1.0, result
    assert result.wall_s < 6 + 3
    await still_serves(backend)


@pytest.mark.parametrize("attack", ["one 5 GiB file", "a hundred 50 MiB files"])
async def test_disk_filling_stops_at_the_scratch_cap(backend, attack):
    """Writing GiBs to /tmp fails at the tmpfs cap; the host disk does not fill."""
    free = disk_free_mb()
    count, size_mb = (1, 5 * 1024) if attack.startswith("one") else (100, 50)
    result = await backend.run(py(f"""
        import os, sys
        written = 0
        try:
            for i in range({count}):
                with open(f"/tmp/f{{i}}", "wb") as f:
                    for _ in range({size_mb}):
                        f.write(b"0" * 2**20); written += 1
        except OSError as exc:
            print("stopped", written, exc.errno)
            sys.exit(0)
        print("wrote all", written)
    """))
    assert "wrote all" not in result.stdout, result
    assert result.status in ("ok", "killed"), result  # ENOSPC, or SIGXFSZ at RLIMIT_FSIZE
    if result.status == "ok":
        assert int(result.stdout.split()[1]) <= LIMITS.disk_mb
    assert disk_free_mb() > free - 500
    await still_serves(backend)


async def test_host_loopback_service_is_unreachable(backend):
    """A service listening on the host's 127.0.0.1 cannot be reached from a job."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    accepted: list[object] = []
    thread = threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True)
    thread.start()
    try:
        result = await backend.run(py(f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2)
                print("connected")
            except OSError as exc:
                print("blocked", type(exc).__name__)
        """))
    finally:
        server.close()
    assert result.status == "ok" and result.stdout.startswith("blocked"), result
    assert accepted == []
    await still_serves(backend)


async def test_host_secret_is_unreadable_and_nothing_is_written_outside(backend, tmp_path):
    """A host secret cannot be read, and writes to /work, / and /usr all fail."""
    secret_dir = Path(f"/root/whet-test-secrets-{os.getpid()}-{secrets.token_hex(4)}")
    secret_dir.mkdir(mode=0o700)
    secret = secret_dir / "secret"
    token = secrets.token_hex(16)
    secret.write_text(token)
    try:
        result = await backend.run(py(f"""
            for path in ["{secret}", "/etc/shadow", "/proc/1/environ"]:
                try:
                    print(open(path).read()[:200])
                except OSError as exc:
                    print("denied", path, exc.errno)
            for path in ["/work/new.txt", "/escape.txt", "/usr/escape.txt", "/etc/escape"]:
                try:
                    open(path, "w").write("x"); print("WROTE", path)
                except OSError as exc:
                    print("denied", path, exc.errno)
        """, files={"given.txt": b"data"}))
    finally:
        secret.unlink()
        secret_dir.rmdir()
    assert result.status == "ok", result
    assert token not in result.stdout and "WROTE" not in result.stdout, result.stdout
    assert result.stdout.count("denied") >= 5, result.stdout
    for env in ("python", "shell"):
        from sandbox import envs

        assert not (envs.rootfs(envs.spec(env)) / "escape.txt").exists()
    await still_serves(backend)


async def test_host_processes_cannot_be_killed(backend):
    """kill -9 -1 and killing the executor's pid reach nothing outside the job."""
    sentinel = subprocess.Popen(["sleep", "60"], user=UID_BASE, group=UID_BASE)  # a slot's uid!
    try:
        result = await backend.run(Job(command=["bash", "-c",
                                                f"kill -9 {os.getpid()} {sentinel.pid} 1; kill -9 -1; echo done"],
                                       limits=LIMITS))
        assert sentinel.poll() is None, "a host process of the slot uid was killed"
    finally:
        sentinel.kill()
        sentinel.wait()
    assert result.status in ("ok", "killed", "nonzero_exit"), result
    await still_serves(backend)


async def test_setsid_orphan_does_not_outlive_the_job(backend):
    """A setsid grandchild holding stdout is reaped with the job; the job does not wait for it."""
    result = await backend.run(Job(command=["bash", "-c",
                                            "setsid bash -c 'sleep 30; echo late' & echo started"],
                                   limits=LIMITS))
    assert result.status == "ok" and result.stdout.strip() == "started", result
    assert result.wall_s < 5, result
    assert slot_processes(backend) == []
    await still_serves(backend)


async def test_stdout_flood_is_cut_at_the_output_limit(backend):
    """A flood of output stops the job with 'output_limit' and keeps only the cap."""
    result = await backend.run(py("while True: print('y' * 1000)"))
    assert result.status == "output_limit", result
    assert result.stdout_truncated and len(result.stdout) <= LIMITS.output_bytes
    assert result.wall_s < 5
    await still_serves(backend)


async def test_test_files_cannot_be_rewritten(backend):
    """The job's files are read-only: overwrite, delete, rename and chmod all fail."""
    result = await backend.run(py("""
        import os
        for attempt in (lambda: open("test_hidden.py", "w").write("def test(): pass"),
                        lambda: os.remove("test_hidden.py"),
                        lambda: os.rename("test_hidden.py", "x.py"),
                        lambda: os.chmod("test_hidden.py", 0o777)):
            try:
                attempt(); print("CHANGED")
            except OSError as exc:
                print("denied", exc.errno)
        print(open("test_hidden.py").read())
    """, files={"test_hidden.py": b"assert False"}))
    assert result.status == "ok", result
    assert "CHANGED" not in result.stdout and result.stdout.count("denied") == 4
    assert result.stdout.strip().endswith("assert False")
    await still_serves(backend)


async def test_nothing_left_in_tmp_or_shm_for_the_next_job(backend):
    """Files a job leaves in /tmp and /dev/shm are gone for every later job (every slot)."""
    leave = py("""
        import os
        for d in ("/tmp", "/dev/shm"):
            open(f"{d}/leftover", "w").write("x"); os.mkdir(f"{d}/dir"); os.chmod(f"{d}/dir", 0)
        print("left")
    """)
    look = py("import os; print(sorted(os.listdir('/tmp')) + sorted(os.listdir('/dev/shm')))")
    for _ in range(2):
        assert (await backend.run(leave)).stdout.strip() == "left"
    for _ in range(4):
        seen = await backend.run(look)
        assert (seen.status, seen.stdout.strip()) == ("ok", "[]"), seen
