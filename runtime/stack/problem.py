"""One thing this machine or config lacks before a run can start: what, where, and the fix.

Produced by the preflight checks (`runtime.stack.preflight`, `runtime.stack.references`);
printed by `whet up` and `whet doctor`. It checks nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing this machine lacks for this config."""

    what: str
    "What is missing or wrong."
    where: str
    "The config key (or machine part) it follows from."
    fix: str
    "The command or change that fixes it."

    def line(self) -> str:
        """The problem as the one line `whet up` and `whet doctor` print."""
        return f"{self.what} [{self.where}]; fix: {self.fix}"
