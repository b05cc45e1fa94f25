"""Per-slot cgroups for the local backend, on cgroup v2 or on v1 (hybrid hosts included).

Consumes the host's cgroup mounts (`/proc/self/mountinfo`, `/proc/self/cgroup`); produces a
`SlotCgroup` per executor slot: the paths a launcher writes its pid into, limits set per job
(memory with swap, pids, cpu quota), and per-job accounting (CPU seconds, peak memory, OOM
kills) and reaping (`cgroup.kill`, or a kill loop where that file does not exist).

`detect()` says which layout it found: 'v2' (one unified hierarchy with memory, pids and cpu)
or 'v1' (separate hierarchies; a v2 mount beside them, as on hybrid hosts, is used only for
`cgroup.kill`). Slot cgroups live under the executor's own cgroup in a folder of its own and
are reused job after job (counters are read as differences; peaks are reset).

It does NOT start processes; `sandbox.local` does.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

_LIMIT_CONTROLLERS = ("memory", "pids", "cpu")
_MB = 1024 * 1024


class CgroupUnavailable(RuntimeError):
    """The host has no usable cgroup layout (named in the message)."""


@dataclass(frozen=True)
class Layout:
    """Where each controller's hierarchy is mounted, and this process's place in it."""

    mode: str
    "'v2' or 'v1'."
    dirs: dict[str, Path]
    "controller ('memory', 'pids', 'cpu', 'cpuacct', 'unified') -> this process's cgroup dir."
    roots: dict[str, Path]
    "controller -> the hierarchy's mount point (where a container engine's cgroupfs paths start)."

    def at_root(self) -> Layout:
        """The same layout, with folders placed from each hierarchy's root."""
        return Layout(self.mode, dict(self.roots), dict(self.roots))

    def describe(self) -> str:
        extra = " (+v2 for cgroup.kill)" if self.mode == "v1" and "unified" in self.dirs else ""
        return f"cgroup {self.mode}{extra}"


def detect(proc: Path = Path("/proc/self")) -> Layout:
    """Find the cgroup layout of this host, preferring a complete v2 hierarchy. `proc` is
    where `mountinfo` and `cgroup` are read (this process's, unless a test says otherwise)."""
    mounts: dict[str, tuple[Path, str]] = {}
    for line in (proc / "mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        fstype, root, point = rfields[0], fields[3], Path(fields[4])
        if fstype == "cgroup2":
            mounts.setdefault("unified", (point, root))
        elif fstype == "cgroup":
            for opt in rfields[2].split(","):
                if opt in ("memory", "pids", "cpu", "cpuacct"):
                    mounts.setdefault(opt, (point, root))
    own: dict[str, str] = {}
    for line in (proc / "cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else ["unified"]:
            own[name] = path
    dirs = {name: _place(point, root, own.get(name, "/")) for name, (point, root) in mounts.items()}
    unified = dirs.get("unified")
    available: set[str] = set()
    if unified is not None:
        try:
            available = set((unified / "cgroup.controllers").read_text().split())
        except OSError:
            pass  # not our hierarchy to read: counts as no controllers
        if set(_LIMIT_CONTROLLERS) <= available:
            return Layout("v2", {"unified": unified}, {"unified": mounts["unified"][0]})
    if all(name in dirs for name in ("memory", "pids", "cpu", "cpuacct")):
        return Layout("v1", dirs, {name: point for name, (point, _) in mounts.items()})
    raise CgroupUnavailable(
        f"no usable cgroups: v2 controllers {sorted(available) if unified else 'absent'}, "
        f"v1 hierarchies {sorted(k for k in dirs if k != 'unified')}; need memory, pids, cpu")


def _place(point: Path, root: str, path: str) -> Path:
    rel = path[len(root):] if root != "/" and path.startswith(root) else path
    return point / rel.lstrip("/")


def _enable_v2_controllers(parent: Path) -> None:
    """Let `parent`'s children use memory, pids and cpu (no-internal-process rule obeyed)."""
    wanted = " ".join(f"+{c}" for c in _LIMIT_CONTROLLERS)
    try:
        (parent / "cgroup.subtree_control").write_text(wanted)
    except OSError:
        # Processes in `parent` block delegation: move them into a leaf beside our slots.
        leaf = parent / "whet-leaf"
        leaf.mkdir(exist_ok=True)
        for pid in (parent / "cgroup.procs").read_text().split():
            try:
                (leaf / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # exited, or a kernel thread
        (parent / "cgroup.subtree_control").write_text(wanted)


class SlotCgroup:
    """The cgroup(s) of one executor slot."""

    def __init__(self, layout: Layout, group: str, slot: int) -> None:
        self.layout = layout
        self.dirs = {name: base / group / f"slot{slot}" for name, base in layout.dirs.items()}
        self._oom_before = 0
        self._cpu_before = 0
        self._peak_fd: int | None = None
        self.keep: set[int] = set()
        "Long-lived members (the slot's spawner and warm zygote): never killed between jobs."
        for d in self.dirs.values():
            d.mkdir(exist_ok=True)

    @classmethod
    def prepare_root(cls, layout: Layout, group: str) -> None:
        """Create the executor's folder in every hierarchy."""
        for name, base in layout.dirs.items():
            (base / group).mkdir(exist_ok=True)
            if layout.mode == "v2":
                _enable_v2_controllers(base)
                (base / group / "cgroup.subtree_control").write_text(
                    " ".join(f"+{c}" for c in _LIMIT_CONTROLLERS))

    @property
    def procs_files(self) -> list[str]:
        """Files a launcher writes its own pid into (every hierarchy)."""
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def start_job(self, memory_mb: int, pids: int, cpus: float) -> None:
        """Set this job's limits and start its accounting (the slot may hold a waiting sandbox)."""
        limit = memory_mb * _MB
        pids += len(self.keep)  # the job's own count excludes the slot's resident processes
        period = 100_000
        quota = max(int(cpus * period), 1000)
        if self.layout.mode == "v2":
            d = self.dirs["unified"]
            _write(d / "memory.max", limit)
            _write_optional(d / "memory.swap.max", 0)
            _write(d / "pids.max", pids)
            _write(d / "cpu.max", f"{quota} {period}")
            self._cpu_before = _usage_usec(d) * 1000
            self._oom_before = _oom_kills(d / "memory.events")
            self._reset_v2_peak(d)
            return
        mem = self.dirs["memory"]
        _write_optional(mem / "memory.memsw.limit_in_bytes", -1)  # lets the limit move either way
        _write(mem / "memory.limit_in_bytes", limit)
        _write_optional(mem / "memory.memsw.limit_in_bytes", limit)  # swap counted in the limit
        _write(mem / "memory.max_usage_in_bytes", 0)
        _write(self.dirs["pids"] / "pids.max", pids)
        _write(self.dirs["cpu"] / "cpu.cfs_period_us", period)
        _write(self.dirs["cpu"] / "cpu.cfs_quota_us", quota)
        self._cpu_before = int((self.dirs["cpuacct"] / "cpuacct.usage").read_text())
        self._oom_before = _oom_kills(mem / "memory.oom_control")

    def usage(self) -> tuple[float, float, bool]:
        """(CPU seconds, peak memory MB, whether the OOM killer struck) since `start_job`."""
        if self.layout.mode == "v2":
            d = self.dirs["unified"]
            cpu = (_usage_usec(d) * 1000 - self._cpu_before) / 1e9
            oom = _oom_kills(d / "memory.events") > self._oom_before
            return cpu, self._read_v2_peak(d) / _MB, oom
        cpu = (int((self.dirs["cpuacct"] / "cpuacct.usage").read_text()) - self._cpu_before) / 1e9
        peak = int((self.dirs["memory"] / "memory.max_usage_in_bytes").read_text())
        oom = _oom_kills(self.dirs["memory"] / "memory.oom_control") > self._oom_before
        return cpu, peak / _MB, oom

    def _reset_v2_peak(self, d: Path) -> None:
        # memory.peak resets per open file (Linux 6.12+): keep the fd from start to usage.
        if self._peak_fd is not None:
            os.close(self._peak_fd)
            self._peak_fd = None
        try:
            fd = os.open(d / "memory.peak", os.O_RDWR)
        except OSError:
            return
        try:
            os.write(fd, b"reset")
        except OSError:
            pass  # older kernel: the peak counts since the slot was made
        self._peak_fd = fd

    def _read_v2_peak(self, d: Path) -> int:
        if self._peak_fd is not None:
            return int(os.pread(self._peak_fd, 64, 0) or b"0")
        current = d / "memory.current"
        return int(current.read_text()) if current.exists() else 0

    def pids(self) -> list[int]:
        """Processes in the slot now."""
        d = self.dirs.get("unified") or self.dirs["pids"]
        try:
            return [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def strays(self) -> list[int]:
        """Processes in the slot other than its residents."""
        return [pid for pid in self.pids() if pid not in self.keep]

    def kill_all(self, wait_s: float = 5.0) -> bool:
        """SIGKILL everything in the slot but `keep`, and wait until only `keep` is left;
        False if something else is still there after `wait_s`."""
        kill_file = self.dirs.get("unified", Path("/nonexistent")) / "cgroup.kill"
        deadline = time.monotonic() + wait_s
        while True:
            pids = self.strays()
            if not pids:
                return True
            if kill_file.exists() and not self.keep:
                _write(kill_file, 1)
            else:
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)

    def remove(self) -> None:
        """Delete the slot's cgroups (they must be empty)."""
        if self._peak_fd is not None:
            os.close(self._peak_fd)
            self._peak_fd = None
        for d in self.dirs.values():
            for _ in range(500):  # a cgroup stays busy for a moment after its last task died
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.002)


def reap_stale(layout: Layout, prefix: str) -> int:
    """Kill and delete `<prefix><pid>` folders left by executors that died (pid gone)."""
    reaped = 0
    for base in layout.dirs.values():
        for folder in base.glob(f"{prefix}*"):
            pid = folder.name[len(prefix):]
            if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            for slot in folder.glob("slot*"):
                stale = SlotCgroup.__new__(SlotCgroup)
                stale.layout, stale.dirs, stale._peak_fd = layout, {"unified": slot}, None
                stale.kill_all()
                stale.remove()
            for leftover in sorted(folder.glob("**/"), reverse=True):
                try:
                    leftover.rmdir()
                except OSError:
                    pass
            reaped += 1
    return reaped


def remove_group(layout: Layout, group: str) -> None:
    """Delete the executor's folder in every hierarchy (its slots must be gone)."""
    for base in layout.dirs.values():
        try:
            (base / group).rmdir()
        except (FileNotFoundError, OSError):
            pass


def _usage_usec(d: Path) -> int:
    for line in (d / "cpu.stat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value)
    return 0


def _oom_kills(path: Path) -> int:
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


def _write(path: Path, value: object) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def _write_optional(path: Path, value: object) -> None:
    try:
        _write(path, value)
    except (FileNotFoundError, PermissionError):
        pass  # swap accounting is off on this host
