"""DeepSpeed's built ops: one folder per environment, and no wait on a lock left by a killed build."""

from __future__ import annotations

import os
import time

import pytest

from policy.extensions import STALE_LOCK_S, clear_stale_locks, extensions_dir

pytestmark = pytest.mark.unit


def test_each_environment_prefix_gets_its_own_folder(tmp_path):
    """Two venv paths (a symlinked venv in another checkout) do not share a build folder."""
    a = extensions_dir("/work/main/.venv", tmp_path)
    b = extensions_dir("/work/other/.venv", tmp_path)
    assert a != b and a.parent == b.parent == tmp_path
    assert extensions_dir("/work/main/.venv", tmp_path) == a


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
