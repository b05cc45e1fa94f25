"""The registry of verifier kinds: each kind one module of this package, listed here once.

Consumes a `Task` or a kind name; produces the kind's `Kind` record (`judging.kinds.base`),
which says how its attempts are read, gated, run, scored and audited. Adding a kind is one
new module declaring its `KIND` and one line in `_MODULES`. It judges nothing itself.
"""

from __future__ import annotations

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


__all__ = ["KINDS", "NAMES", "Kind", "of"]
