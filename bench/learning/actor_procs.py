"""Actors as real OS processes for benchmarks, and what they logged.

Consumes a config file, a NATS URL and a run directory; produces actor processes
(`runtime.stack.actor`, as the supervisor would start them) and their JSON-lines events,
plus synthetic verdicts for feeding a learner without a judge. It measures nothing itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from bus.codec import pack_f32, pack_ids
from bus.messages import Attempt, Task, Turn, Verdict, Verifier

ROOT = Path(__file__).resolve().parents[2]


class ActorProcess:
    def __init__(self, kind: str, instance: str, config: Path, url: str, run_dir: Path,
                 threads: int = 1) -> None:
        self.kind, self.instance, self.config, self.url = kind, instance, config, url
        self.run_dir, self.threads = run_dir, threads
        self.proc: subprocess.Popen | None = None

    def start(self) -> "ActorProcess":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(self.threads)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.stack.actor", "--kind", self.kind, "--instance",
             self.instance, "--config", str(self.config), "--url", self.url,
             "--run-dir", str(self.run_dir)],
            cwd=ROOT, env=env, stdout=open(self.run_dir / f"{self.instance}.out", "ab"),
            stderr=subprocess.STDOUT)
        return self

    def events(self, name: str | None = None) -> list[dict]:
        path = self.run_dir / "logs" / f"{self.instance}.jsonl"
        if not path.exists():
            return []
        out = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [e for e in out if name is None or e["event"] == name]

    def wait_for(self, predicate: Callable[[list[dict]], bool], timeout_s: float = 300) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            events = self.events()
            if predicate(events):
                return events
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.instance} exited: "
                                   + (self.run_dir / f"{self.instance}.out").read_text()[-2000:])
            time.sleep(0.1)
        raise TimeoutError(f"{self.instance}: condition not met in {timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def synthetic_verdicts(groups: int, group_size: int, prompt_len: int, completion_len: int,
                       vocab: int = 49152, prefix: str = "s", seed: int = 0) -> list[Verdict]:
    """Judged attempts with made-up tokens and rewards 1,0,1,0.. in each group (all trainable)."""
    rng = np.random.default_rng(seed)
    task = Task(task_id="bench/0", env="bench", env_version="1", domain="python",
                prompt="p", verifier=Verifier(kind="python_io"))
    out = []
    for g in range(groups):
        for i in range(group_size):
            turn = Turn(prompt_ids=pack_ids(rng.integers(3, vocab, prompt_len)),
                        completion_ids=pack_ids(rng.integers(3, vocab, completion_len)),
                        logprobs=pack_f32(-rng.random(completion_len) * 3), completion="",
                        policy_version=0)
            attempt = Attempt(attempt_id=f"{prefix}{g}.{i}", group_id=f"{prefix}{g}", index=i,
                              group_size=group_size, task=task, turns=[turn], policy_version=0)
            reward = float(i % 2 == 0)
            out.append(Verdict(verdict_id=attempt.attempt_id, attempt=attempt,
                               outcome="pass" if reward else "fail", reward=reward))
    return out
