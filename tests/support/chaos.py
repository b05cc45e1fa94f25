"""What the chaos test reads back after a run: who was admitted, judged, trained or dropped.

Consumes a run directory's JSON-lines event logs (appended across restarts of an instance)
and the verdicts of the verdict stream; produces the fate of every attempt:

- admitted: the sampler's `tasks.admitted` events name each assignment; its attempts are
  '<assignment id>.<index>' for index < group size;
- trained / left out: the learner's `learner.step_completed` events of the updates that
  survived. A learner killed after step n resumes from its last checkpoint k <= n, so its
  steps k+1..n were lost (their verdicts are redelivered and consumed again); the surviving
  lineage is every incarnation's steps up to the step the next one resumed from, plus all
  steps of the last one. Late group members (`learner.late_member_dropped`) are final too;
- frozen and thawed: the supervisor's `actor.unresponsive` and `actor.responsive`.

It decides nothing about the system under test; the test asserts on what it returns.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bus.nats_bus import BusSettings


def events(run_dir: Path, instance: str) -> list[dict]:
    """Every event an instance logged, in order, across its restarts (a line still being
    written, without its newline, is left for the next read)."""
    path = run_dir / "logs" / f"{instance}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().split("\n")[:-1] if line.strip()]


def admitted_attempts(sampler_events: list[dict], group_size: int) -> set[str]:
    """Attempt ids of every assignment the sampler says it admitted."""
    return {f"{aid}.{i}" for e in sampler_events if e["event"] == "tasks.admitted"
            for aid in e["fields"]["assignment_ids"] for i in range(group_size)}


def incarnations(learner_events: list[dict]) -> list[list[dict]]:
    """The learner's events split at each (re)start."""
    runs: list[list[dict]] = []
    for e in learner_events:
        if e["event"] in ("learner.started_fresh", "learner.resumed") or not runs:
            runs.append([])
        runs[-1].append(e)
    return runs


@dataclass
class LearnerRecord:
    """The learner's surviving updates and what they consumed."""

    steps: list[dict] = field(default_factory=list)
    "Fields of each surviving `learner.step_completed`, in order."
    lost_steps: int = 0
    "Steps done but lost to a kill before their checkpoint."
    resumes: list[dict] = field(default_factory=list)
    "Fields of each `learner.resumed`."
    late: list[str] = field(default_factory=list)

    def fates(self) -> list[tuple[str, str]]:
        """(verdict id, 'trained' or the reason it was left out), one per consumption."""
        out = [(vid, "trained") for s in self.steps for vid in s["trained"]]
        out += [(vid, reason) for s in self.steps
                for reason, ids in s.get("left_out", {}).items() for vid in ids]
        return out + [(vid, "late") for vid in self.late]

    def consumed_through(self, step: int) -> int:
        """Verdicts consumed by surviving steps up to `step` (what its checkpoint records)."""
        return sum(len(s["trained"]) + sum(len(v) for v in s.get("left_out", {}).values())
                   for s in self.steps if s["step"] <= step)


def learner_record(learner_events: list[dict]) -> LearnerRecord:
    record = LearnerRecord()
    runs = incarnations(learner_events)
    for n, run in enumerate(runs):
        steps = [e["fields"] for e in run if e["event"] == "learner.step_completed"]
        nxt = runs[n + 1][0] if n + 1 < len(runs) else None
        kept = steps if nxt is None else [s for s in steps if s["step"] <= nxt["fields"]["step"]]
        record.steps += kept
        record.lost_steps += len(steps) - len(kept)
        record.resumes += [e["fields"] for e in run if e["event"] == "learner.resumed"]
        record.late += [e["fields"]["verdict_id"] for e in run
                        if e["event"] == "learner.late_member_dropped"]
    return record


def repeated(ids) -> dict[str, int]:
    """Ids seen more than once, with their counts."""
    return {i: n for i, n in Counter(ids).items() if n > 1}


def supervisor_said(run_dir: Path, event: str, instance: str, pid: int) -> bool:
    """Whether the supervisor logged `event` for process `pid` of `instance`."""
    return any(e["event"] == event and e["fields"].get("child") == instance
               and e["fields"].get("pid") == pid for e in events(run_dir, "supervisor"))


def patient_max_deliver(ack_wait_s: float) -> int:
    """Deliveries that give a message the defaults' patience in seconds (`max_deliver` of
    `ack_wait_s`: 5 of 30 s) at a test's shorter ack wait. A chaos test shortens the ack wait
    to be quick but not its freezes (the server's, an actor's until the supervisor calls it
    unresponsive, longer on a loaded machine); at 5 deliveries of 3 s, messages held through
    two freezes were dead-lettered in CI, which the defaults would not do."""
    defaults = BusSettings(url="")
    return math.ceil(defaults.max_deliver * defaults.ack_wait_s / ack_wait_s)

