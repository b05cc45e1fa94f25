"""What starts one local job: the slot spawner's command, and the job's setpriv+bubblewrap argv.

Consumes a job's limits, its slot (uid, cgroup files), the environment tree and its folder;
produces
- `spawner_argv`: a bash line that, as root, writes its own pid into every cgroup of the slot
  and execs the slot's spawner (`sandbox/spawner.py`), so every job it starts is born in the
  slot's cgroup (counted, limited, and killed as one);
- `spawn_request`: what the spawner runs per job: rlimits (CPU time, file size, open files,
  no core), the slot's unprivileged uid with no_new_privs, then bubblewrap: new user, pid, net, mount, ipc, uts and cgroup namespaces; the environment tree
  read-only as `/`; the job folder read-only at `/work` (the working directory); size-capped
  tmpfs at `/tmp` and `/dev/shm` as the only writable places; fd 3 the report channel and
  fd 4 bubblewrap's JSON status.

Pure: it runs nothing. `sandbox.local` runs these and `sandbox.zygote` reuses `job_env`.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from bus.messages import Limits
from sandbox.envs import EnvSpec

BWRAP = "/usr/bin/bwrap"
"Where Debian's bubblewrap puts it; the local backend uses the one on PATH."
HOST_PYTHON = "/usr/bin/python3"
STATUS_FD = 4
"Where bubblewrap's JSON status goes in the launched job (0-2 stdio, 3 the report)."
WORK = "/work"
LAUNCH_FAILED = 125
"Exit code of the spawner's launcher when it could not join the slot cgroup."


@dataclass(frozen=True)
class Slot:
    """Where one job runs: its unprivileged uid and the cgroup files its launcher joins."""

    index: int
    uid: int
    procs_files: tuple[str, ...]


def job_env(env: EnvSpec, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment a job sees (nothing leaks in from the executor)."""
    values = {"PATH": env.path, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
              "USER": "sandbox", "LOGNAME": "sandbox", "WHET_REPORT_FD": "3"}
    values.update(env.env)
    values.update(extra or {})
    return values


def bwrap_args(rootfs: str, workdir: str, limits: Limits, env: dict[str, str],
               status_fd: int | None = None, bwrap: str = BWRAP) -> list[str]:
    """bubblewrap options for one sandbox (without the command); `bwrap` is its binary."""
    size = str(limits.disk_mb * 1024 * 1024)
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session",
            "--hostname", "sandbox", "--ro-bind", rootfs, "/", "--proc", "/proc",
            "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
            "--size", size, "--tmpfs", "/tmp", "--ro-bind", workdir, WORK, "--chdir", WORK,
            "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    return args


def rlimits(limits: Limits) -> dict[str, int]:
    """Per-process limits: CPU seconds, file size (bytes), open files, no core dumps."""
    cpu = max(1, math.ceil(limits.cpu_s))
    return {"RLIMIT_CPU": cpu, "RLIMIT_FSIZE": limits.disk_mb * 1024 * 1024,
            "RLIMIT_NOFILE": limits.nofile, "RLIMIT_CORE": 0}


def spawn_request(slot: Slot, limits: Limits, bwrap: list[str], command: list[str]) -> dict:
    """The spawner's request for one job (fds 0-4 are passed alongside); the spawner drops
    to `uid` (groups cleared, no_new_privs) itself before it execs bubblewrap."""
    return {"argv": bwrap + ["--", *command], "rlimits": rlimits(limits), "uid": slot.uid}


def spawner_argv(slot: Slot, script: str, socket_fd: int, request_file: str) -> list[str]:
    """bash line that joins the slot's cgroups, then becomes the slot's spawner."""
    joins = " && ".join(f"echo $$ > {shlex.quote(f)}" for f in slot.procs_files) or "true"
    run = shlex.join([HOST_PYTHON, "-I", "-S", script, str(socket_fd), request_file])
    return ["/bin/bash", "-c", f"{joins} || exit {LAUNCH_FAILED}\nexec {run}", "whet-spawner"]
