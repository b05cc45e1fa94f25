"""Helpers for the `whet review` tests: trial records, and a stopped run whose own store
holds them (a real nats-server wrote it and has exited, as after `whet down`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import msgspec

from bus import subjects
from bus.messages import LayerResult, Trial
from bus.nats_bus import Bus, Identity
from runtime.broker.cluster import EmbeddedCluster
from runtime.broker.embedded import EmbeddedServer
from runtime.config import RunConfig
from runtime.connect import topology
from tests.conftest import ROOT, bus_settings, with_caps
from tests.test_monitor import verdict

SMALL = with_caps(RunConfig(), trials_max_mb=16, work_max_mb=16, verdicts_max_mb=16,
                  events_max_mb=16)
"Stream caps that fit any test machine's disk."


def trial(i: int, outcome: str, cause: str = "", reward: float | None = 1.0,
          run_id: str = "r-1") -> Trial:
    v = verdict(i, outcome, cause=cause, reward=reward)
    v = msgspec.structs.replace(v, layers=[LayerResult(name="visible", passed=2, total=2, ok=True)])
    return Trial(trial_id=v.verdict_id, run_id=run_id, verdict=v, recorded_at=float(i),
                 recorder="monitor-1")


RUN_TRIALS = [trial(0, "pass"), trial(1, "pass"), trial(2, "pass"),
              trial(3, "fail", "model.wrong_answer", 0.2), trial(4, "fail", "model.wrong_answer", 0.1),
              trial(5, "dropped", "infra.sandbox", None), trial(6, "hack", "model.suspicious_exit", -1.0)]
"Seven trials in four strata: hack, infra.sandbox, model.wrong_answer (2), pass (3)."


async def stopped_run(runs: Path, trials: list[Trial], run_id: str = "r-1",
                      nodes: int = 1) -> Path:
    """`runs/<run_id>` whose stopped embedded store holds `trials` (and a trial of another
    run); with `nodes = 3`, the stores of a local cluster with three replicas."""
    path = runs / run_id
    server = EmbeddedCluster(path / "nats", nodes) if nodes > 1 else EmbeddedServer(path / "nats")
    url = server.start()
    try:
        bus = await Bus.connect(bus_settings(url, replicas=nodes), Identity("test", "test-1"))
        try:
            await bus.ensure_topology(topology(SMALL))
            other = msgspec.structs.replace(trial(9, "pass"), run_id="other-run")
            for t in [*trials, other]:
                await bus.publish(subjects.trial_subject(t.run_id, t.trial_id), t,
                                  msg_id=f"trial.{t.run_id}.{t.trial_id}")
        finally:
            await bus.close()
    finally:
        server.stop()
    (path / "nats.url").write_text(url)
    return path


def whet(run: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """`whet ARGS --run RUN` as a person would type it, with no server URL in the environment."""
    env = {k: v for k, v in os.environ.items() if k != "WHET_NATS_URL"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args, "--run", str(run)],
                          cwd=ROOT, env=env, input=stdin, text=True, capture_output=True,
                          timeout=120)


def shown(out: str) -> list[str]:
    """Trial ids in the order `whet review` showed them."""
    return re.findall(r"^trial (\S+) \(run", out, re.M)
