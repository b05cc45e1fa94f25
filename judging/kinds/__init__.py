"""The registry of verifier kinds: each kind one module of this package, listed here once.

Consumes a `Task` or a kind name; produces the kind's `Kind` record (`judging.kinds.base`),
which says how its attempts are read, gated, run, scored and audited, and `problem`, why a
task's kind cannot be graded at all. Adding a kind is one new module declaring its `KIND`
and one line in `_MODULES`. It judges nothing itself.
"""

from __future__ import annotations

import difflib

from bus.messages import Task
from judging.kinds import python_check, python_io, repo_io, script_io, structured, verifiers
from judging.kinds.base import Kind

_MODULES = (python_io, python_check, script_io, structured, verifiers, repo_io)
KINDS: dict[str, Kind] = {m.KIND.name: m.KIND for m in _MODULES}
"Every registered kind by name, in the order error messages list them."
NAMES = tuple(KINDS)
_UNKNOWN = Kind("")


def of(task: Task) -> Kind:
    """The kind of `task`'s verifier; an unregistered name gets the defaults of `Kind`."""
    return KINDS.get(task.verifier.kind, _UNKNOWN)


def problem(task: Task) -> str:
    """Why no judge can grade `task` by its verifier kind: the kind is not registered (with
    the closest registered name, if one is close); '' when it is."""
    name = task.verifier.kind
    if name in KINDS:
        return ""
    close = difflib.get_close_matches(name, NAMES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"verifier.kind: {name!r} is not a known kind{hint}; expected one of {list(NAMES)}"


__all__ = ["KINDS", "NAMES", "Kind", "of", "problem"]
