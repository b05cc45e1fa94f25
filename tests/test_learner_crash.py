"""kill -9 of the learner process mid-run: it resumes from its checkpoint, with optimizer
state, and no verdict's update is counted twice or lost.

The learner runs as a real actor process (`runtime.stack.actor`) on the tiny model; the
test plays the judge, publishing verdicts with synthetic token ids.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import numpy as np
import pytest

from bus import subjects
from bus.codec import pack_f32, pack_ids
from bus.messages import Attempt, Turn, Verdict
from tests.conftest import ROOT, until_sync
from tests.test_generator import make_task

pytestmark = pytest.mark.stack

GROUPS, GROUP = 24, 2


def synthetic_verdicts(groups: int = GROUPS, version: int = 0, rewards=(1.0, 0.0),
                       prefix: str = "g") -> list[Verdict]:
    """`groups` groups with one verdict per reward in `rewards`, token ids made up."""
    rng = np.random.default_rng(7)
    out = []
    for g in range(groups):
        for i, reward in enumerate(rewards):
            completion = rng.integers(3, 49152, 12)
            turn = Turn(prompt_ids=pack_ids(rng.integers(3, 49152, 20)),
                        completion_ids=pack_ids(completion),
                        logprobs=pack_f32(-rng.random(12) * 4), completion="x",
                        policy_version=version)
            attempt = Attempt(attempt_id=f"{prefix}{g}.{i}", group_id=f"{prefix}{g}", index=i,
                              group_size=len(rewards), task=make_task(g), turns=[turn],
                              policy_version=version)
            out.append(Verdict(verdict_id=attempt.attempt_id, attempt=attempt,
                               outcome="pass" if reward >= 1 else "fail", reward=reward))
    return out


def write_config(tmp_path: Path) -> Path:
    path = tmp_path / "learner.toml"
    path.write_text(f"""
[bus]
ack_wait_s = 3.0
[model]
name = "tiny"
[learner]
lr = 0.001
micro_batch_size = 1
checkpoint_every = 2
checkpoint_dir = "{tmp_path / 'ckpt'}"
[training]
mode = "async"
batch_size = 4
group_size = {GROUP}
max_staleness = 1000
""")
    return path


class LearnerProcess:
    def __init__(self, tmp_path: Path, url: str) -> None:
        self.run_dir = tmp_path / "run"
        self.config = write_config(tmp_path)
        self.url = url
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.run_dir.mkdir(exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.stack.actor", "--kind", "learner", "--instance",
             "learner-1", "--config", str(self.config), "--url", self.url,
             "--run-dir", str(self.run_dir)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
            stdout=open(self.run_dir / "learner.out", "ab"), stderr=subprocess.STDOUT)

    def events(self) -> list[dict]:
        path = self.run_dir / "logs" / "learner-1.jsonl"
        if not path.exists():
            return []
        text = path.read_text()
        # Only whole lines: the learner may be halfway through writing the last one.
        return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines() if line.strip()]

    def wait_for(self, predicate, timeout_s: float = 120.0) -> list[dict]:
        seen: list[list[dict]] = []

        def holds() -> bool:
            events = self.events()
            if predicate(events):
                seen.append(events)
                return True
            assert self.proc.poll() is None, (self.run_dir / "learner.out").read_text()[-3000:]
            return False

        until_sync(holds, timeout_s, lambda: f"last events: {[e['event'] for e in self.events()][-10:]}")
        return seen[-1]

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)


def named(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e["event"] == name]


async def publish_all(bus, verdicts: list[Verdict], suffix: str = "") -> None:
    await bus.publish_many(subjects.verdict_subject("train"),
                           [(v.verdict_id + suffix, v) for v in verdicts])


async def test_learner_killed_mid_run_resumes_and_trains_each_verdict_once(bus, nats_server, tmp_path):
    """Kill -9 one step after a checkpoint; the restarted learner resumes from that checkpoint
    (optimizer steps included), retrains the lost step's verdicts, and every verdict ends up
    in exactly one surviving update. Verdicts redelivered after that are skipped."""
    verdicts = synthetic_verdicts()
    await publish_all(bus, verdicts)
    learner = LearnerProcess(tmp_path, nats_server.url)
    learner.start()
    try:
        await anyio.to_thread.run_sync(lambda: learner.wait_for(
            lambda ev: any(e["fields"]["step"] == 3 for e in named(ev, "learner.step_completed"))))
        learner.kill9()
        before = learner.events()
        learner.start()
        everything = await anyio.to_thread.run_sync(lambda: learner.wait_for(
            lambda ev: _resumed_samples(ev[len(before):]) + sum(
                e["fields"]["samples"] for e in named(ev[len(before):], "learner.step_completed"))
            >= len(verdicts)))
        await publish_all(bus, verdicts[:8], suffix="#again")
        final = await anyio.to_thread.run_sync(lambda: learner.wait_for(
            lambda ev: len(named(ev[len(before):], "learner.duplicate_skipped")) >= 8))
        learner.stop()
    finally:
        if learner.proc and learner.proc.poll() is None:
            learner.proc.kill()
    after = everything[len(before):]
    steps_before = named(before, "learner.step_completed")
    assert len(steps_before) * 4 < len(verdicts), "the kill did not land mid-run"
    [resumed] = named(after, "learner.resumed")
    saved_step = resumed["fields"]["step"]
    assert saved_step >= 2 and resumed["fields"]["optimizer_steps"] == saved_step
    surviving = [e for e in steps_before if e["fields"]["step"] <= saved_step]
    surviving += named(after, "learner.step_completed")
    trained = [vid for e in surviving for vid in e["fields"]["trained"]]
    assert sorted(trained) == sorted(v.verdict_id for v in verdicts)
    first_after = named(after, "learner.step_completed")[0]["fields"]
    assert first_after["step"] == saved_step + 1
    assert first_after["optimizer_steps"] == saved_step + 1
    assert len(named(final, "learner.step_completed")) == len(named(everything, "learner.step_completed"))


def _resumed_samples(events: list[dict]) -> int:
    resumed = [e for e in events if e["event"] == "learner.resumed"]
    return resumed[0]["fields"]["samples"] if resumed else 0
