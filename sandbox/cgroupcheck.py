"""`python3 -m sandbox.cgroupcheck`: say which cgroup layout this host has and prove a slot works.

Consumes the host's cgroups (root needed); prints the layout found (v1, v1 hybrid, v2) and
checks, with plain processes and the host's python3, that a slot limits memory (the OOM
killer strikes inside it), counts CPU seconds, and kills a whole tree but its residents.
Stdlib only, so it runs on a bare host before anything is installed. Exit status 0 when all
checks pass. It does NOT need bubblewrap or the environment trees.
"""

import os
import subprocess
import sys
import time

from sandbox import cgroups

PYTHON = sys.executable or "/usr/bin/python3"


def main() -> int:
    layout = cgroups.detect()
    print(f"layout: {layout.describe()}")
    for name, path in sorted(layout.dirs.items()):
        print(f"  {name}: {path}")
    group = f"whet-check-{os.getpid()}"
    cgroups.SlotCgroup.prepare_root(layout, group)
    slot = cgroups.SlotCgroup(layout, group, 0)
    joins = " && ".join(f"echo $$ > {f}" for f in slot.procs_files)
    failures = []
    try:
        resident = subprocess.Popen(["sh", "-c", f"{joins} && exec sleep 60"])
        time.sleep(0.3)
        slot.keep.add(resident.pid)
        slot.start_job(memory_mb=64, pids=16, cpus=1.0)
        busy = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
        subprocess.run(["sh", "-c", f"{joins} && {PYTHON} -c '{busy}'"], timeout=60)
        hog = subprocess.run(["sh", "-c", f"{joins} && {PYTHON} -c 'x = bytearray(300 * 2**20)'"],
                             timeout=60)
        cpu, peak, oom = slot.usage()
        print(f"cpu_s={cpu:.3f} peak_mb={peak:.1f} oom={oom} hog_exit={hog.returncode}")
        if not 0.5 <= cpu <= 3.0:
            failures.append(f"cpu seconds {cpu:.3f} not about 0.5+")
        if not oom or hog.returncode == 0:
            failures.append("a 300 MB allocation was not OOM-killed under a 64 MB limit")
        subprocess.Popen(["sh", "-c", f"{joins} && (setsid sleep 60 &) && sleep 60"])
        time.sleep(0.3)
        before = len(slot.pids())
        killed = slot.kill_all()
        print(f"processes before kill={before} after={slot.pids()} resident_alive={resident.poll() is None}")
        if not killed or slot.pids() != [resident.pid] or resident.poll() is not None:
            failures.append("kill_all did not leave exactly the resident")
    finally:
        slot.keep.clear()
        slot.kill_all()
        slot.remove()
        cgroups.remove_group(layout, group)
    for failure in failures:
        print("FAILED:", failure)
    print("all checks passed" if not failures else f"{len(failures)} checks failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
