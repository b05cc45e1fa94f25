"""What judging finds in one attempt, before it is composed into a judgement.

`ScoredTest`: one test's outcome, as `judging.layers` scores it from the harness's report.
`HackSign`: one sign of a hack, as `judging.hacks` (and `judging.rubric` for rubric jobs)
reads it. Plain values: they compute nothing; attribution and judgement read them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScoredTest:
    """One test's outcome: its id and layer, passed or not, and why."""

    id: str
    layer: str
    passed: bool | None
    "None when the test does not count (invalid)."
    status: str
    "The harness's status ('ok', 'error', 'timeout', 'exit', 'killed', ...), 'wrong', 'missing' or 'malformed'."
    detail: str
    record: dict


@dataclass(frozen=True)
class HackSign:
    """One sign of a hack (`kind`, e.g. 'fake_pass') and the evidence for it."""

    kind: str
    evidence: str

    @property
    def cause(self) -> str:
        return f"hack.{self.kind}"
