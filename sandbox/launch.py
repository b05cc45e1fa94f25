"""The command line that starts one local job: cgroup entry, rlimits, uid drop, bubblewrap.

Consumes a job's limits, its slot (uid, cgroup files), the environment tree and the fds the
backend prepared; produces the argv of a tiny bash launcher that, as root,

1. writes its own pid into every cgroup of the slot (so everything it starts is counted
   and can be killed as one),
2. moves the report pipe to fd 3 and sets rlimits (CPU time, file size, open files, no core),
3. drops to the slot's unprivileged uid with no_new_privs (`setpriv`), and
4. execs bubblewrap: new user, pid, net, mount, ipc, uts and cgroup namespaces; the
   environment tree read-only as `/`; the job folder read-only at `/work` (the working
   directory); size-capped tmpfs at `/tmp` and `/dev/shm` as the only writable places.

Pure: it runs nothing. `sandbox.local` runs the argv and `sandbox.zygote` reuses `bwrap_args`.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from bus.messages import Limits
from sandbox.envs import EnvSpec

BWRAP = "/usr/bin/bwrap"
SETPRIV = "/usr/bin/setpriv"
WORK = "/work"
LAUNCH_FAILED = 125
"Exit code of the launcher when it could not set the sandbox up (bwrap's status tells apart)."


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
               status_fd: int | None = None) -> list[str]:
    """bubblewrap options for one sandbox (without the command)."""
    size = str(limits.disk_mb * 1024 * 1024)
    args = [BWRAP, "--unshare-all", "--die-with-parent", "--new-session",
            "--hostname", "sandbox", "--ro-bind", rootfs, "/", "--proc", "/proc",
            "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
            "--size", size, "--tmpfs", "/tmp", "--ro-bind", workdir, WORK, "--chdir", WORK,
            "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    return args


def rlimit_line(limits: Limits) -> str:
    """bash `ulimit` for CPU seconds, file size (KiB), open files and core dumps."""
    cpu = max(1, math.ceil(limits.cpu_s))
    return f"ulimit -t {cpu} -f {limits.disk_mb * 1024} -n {limits.nofile} -c 0"


def launcher_argv(slot: Slot, limits: Limits, bwrap: list[str], command: list[str],
                  report_fd: int) -> list[str]:
    """argv of the bash launcher (see the module docstring)."""
    joins = " && ".join(f"echo $$ > {shlex.quote(f)}" for f in slot.procs_files) or "true"
    drop = [SETPRIV, f"--reuid={slot.uid}", f"--regid={slot.uid}", "--clear-groups",
            "--no-new-privs"]
    script = "\n".join([
        f"{joins} || {{ echo 'whet-launch: cannot join the slot cgroup' >&2; exit {LAUNCH_FAILED}; }}",
        f"exec 3>&{report_fd} {report_fd}>&-",
        rlimit_line(limits) + f" || exit {LAUNCH_FAILED}",
        "exec " + shlex.join(drop + bwrap + ["--", *command]),
    ])
    return ["/bin/bash", "-c", script, "whet-launch"]
