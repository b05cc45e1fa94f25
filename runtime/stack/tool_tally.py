"""Tool calls of a run's tool episodes as the judges count them: by kind, and the well-formed share.

Consumes the judges' heartbeat gauges (`bus.gauges.JUDGE_TOOL_PREFIX`: `judge.tool.<name>`
per call, `judge.tool.malformed` per turn without a well-formed call), summed over instances;
produces a `ToolTally` and its text for the live line (`runtime.stack.liveline`) and `whet
status`. A run without tool episodes gives an empty tally, shown nowhere. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bus import gauges as g


@dataclass(frozen=True)
class ToolTally:
    """Turns of tool episodes judged so far: well-formed calls by tool, and malformed turns."""

    by_kind: tuple[tuple[str, int], ...] = ()
    "Well-formed calls per tool name, most used first (ties by name)."
    malformed: int = 0
    "Turns that held no well-formed tool call."

    @property
    def well_formed(self) -> int:
        return sum(n for _, n in self.by_kind)

    @property
    def total(self) -> int:
        return self.well_formed + self.malformed

    @property
    def share(self) -> float:
        """Well-formed turns over all turns (0 before any)."""
        return self.well_formed / self.total if self.total else 0.0

    def text(self) -> str:
        """'tools 10/12 well-formed (83%): read_file 5, run_tests 4, submit 1' ('' when empty);
        the share first, so a line cut to the terminal's width loses the kinds first."""
        if not self.total:
            return ""
        kinds = ", ".join(f"{name} {n}" for name, n in self.by_kind)
        return (f"tools {self.well_formed}/{self.total} well-formed ({self.share:.0%})"
                + (f": {kinds}" if kinds else ""))

    def as_dict(self) -> dict:
        return {"by_kind": dict(self.by_kind), "malformed": self.malformed,
                "total": self.total, "well_formed_share": round(self.share, 4)}


def tally(stats: Iterable[Mapping[str, float]]) -> ToolTally:
    """The tally of some heartbeats' gauges (pass the judges'), summed over them."""
    counts: dict[str, int] = {}
    for one in stats:
        for key, value in one.items():
            if key.startswith(g.JUDGE_TOOL_PREFIX):
                name = key[len(g.JUDGE_TOOL_PREFIX):]
                counts[name] = counts.get(name, 0) + int(value)
    malformed = counts.pop(g.TOOL_MALFORMED, 0)
    by_kind = tuple(sorted(((k, n) for k, n in counts.items() if n), key=lambda kn: (-kn[1], kn[0])))
    return ToolTally(by_kind=by_kind, malformed=malformed)
