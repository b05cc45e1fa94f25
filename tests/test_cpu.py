"""Where the cores go: CPU seconds per process tree, from /proc."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runtime.stack.cpu import cpu_by_label, process_table, tree_cpu
from tests.conftest import until_sync


@pytest.mark.unit
def test_tree_cpu_sums_a_process_and_all_its_descendants():
    """pid 10 with a child 11 and a grandchild 12 counts all three; 20 is another tree."""
    table = {10: (1, 1.0), 11: (10, 2.0), 12: (11, 4.0), 20: (1, 8.0), 21: (20, 16.0)}
    assert tree_cpu([10], table) == 7.0
    assert tree_cpu([11, 20], table) == 30.0
    assert tree_cpu([99], table) == 0.0
    assert cpu_by_label({"judge": [10], "learner": [20]}, table) == {"judge": 7.0, "learner": 24.0}


@pytest.mark.unit
def test_a_busy_grandchild_is_charged_to_the_tree_it_runs_under():
    """A shell whose child spins for a while: the shell's tree shows that CPU, live."""
    spin = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.6: pass\nprint('ok')"
    proc = subprocess.Popen(["sh", "-c", f'{sys.executable} -c "{spin}"; sleep 5'])
    try:
        until_sync(lambda: tree_cpu([proc.pid], process_table()) >= 0.5, 20,
                   "the grandchild's CPU never showed")
        assert process_table()[proc.pid][0] == os.getpid()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.bus
async def test_metered_backend_counts_sandbox_cpu_the_process_tree_misses():
    """A job spinning 1 s in the local sandbox: the wrapper counts about that much, while
    this process's tree shows far less (sandboxed processes escape it)."""
    from bus.messages import Job, Limits
    from sandbox import Metered, open_backend
    from sandbox.config import SandboxConfig

    spin = b"import time\nt=time.process_time()\nwhile time.process_time()-t<1.0: pass\n"
    backend = Metered(await open_backend(SandboxConfig()))
    try:
        before = tree_cpu([os.getpid()], process_table())
        result = await backend.run(Job(command=["python3", "spin.py"], files={"spin.py": spin},
                                       limits=Limits(timeout_s=20, cpu_s=10)))
        tree = tree_cpu([os.getpid()], process_table()) - before
    finally:
        await backend.aclose()
    assert result.status == "ok" and backend.cpu_s >= 1.0
    assert tree < backend.cpu_s / 2, (tree, backend.cpu_s)
