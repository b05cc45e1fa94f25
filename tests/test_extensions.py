"""DeepSpeed's built ops: one folder per environment, no wait on a lock left by a killed build,
and none built that a single rank does not use."""

from __future__ import annotations

import os
import time

import pytest

from policy.extensions import STALE_LOCK_S, clear_stale_locks, extensions_dir


@pytest.mark.unit
def test_each_environment_prefix_gets_its_own_folder(tmp_path):
    """Two venv paths (a symlinked venv in another checkout) do not share a build folder."""
    a = extensions_dir("/work/main/.venv", tmp_path)
    b = extensions_dir("/work/other/.venv", tmp_path)
    assert a != b and a.parent == b.parent == tmp_path
    assert extensions_dir("/work/main/.venv", tmp_path) == a


@pytest.mark.unit
def test_a_lock_older_than_any_build_is_removed_and_a_fresh_one_is_kept(tmp_path):
    """A lock a killed build left long ago goes; a lock a running build holds now stays."""
    old = tmp_path / "deepspeed_shm_comm" / "lock"
    new = tmp_path / "cpu_adam" / "lock"
    for lock in (old, new):
        lock.parent.mkdir()
        lock.touch()
    past = time.time() - STALE_LOCK_S - 60
    os.utime(old, (past, past))
    assert clear_stale_locks(tmp_path) == [old]
    assert not old.exists() and new.exists()


SINGLE_RANK = """
import os, socket
from policy.deepspeed_setup import import_engine
from policy.extensions import skip_shared_memory_op
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]),
                      RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
import_engine("cpu")
import deepspeed
assert skip_shared_memory_op(1) and not skip_shared_memory_op(2)
deepspeed.init_distributed(dist_backend="gloo")
print("world", deepspeed.comm.get_world_size())
"""


@pytest.mark.bus
def test_a_single_rank_learner_compiles_no_shared_memory_op(tmp_path):
    """DeepSpeed's CPU backend compiles its shared-memory all-reduce (about a minute of CPU
    on a fresh machine) when it starts; one rank has no peer to share memory with, so the
    learner's start skips it and an empty extensions folder stays without it."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", SINGLE_RANK], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "world 1" in proc.stdout
    assert not list(tmp_path.glob("**/deepspeed_shm_comm*")), sorted(tmp_path.rglob("*"))
