"""Stand-ins for the candidate inside trusted test code, and what its failures mean there.

Consumes calls made by `check(candidate)` code in the harness process; produces the values
the candidate returned (decoded from `wire`), the candidate's own exceptions rebuilt as the
same built-in type (so a test may expect them), or `CandidateFailure` for a call that ended
without a value (timeout, exit, kill, flood, refusal to encode). `step` runs one test
statement and says how it went. Loaded by `harness.py` from this directory; it does NOT
talk to the worker itself (the session does).
"""

from __future__ import annotations

import builtins

import wire


class CandidateFailure(BaseException):
    """A call to the candidate ended without a value (timeout, exit, kill, flood, refusal)."""

    def __init__(self, outcome: dict) -> None:
        super().__init__(outcome["detail"])
        self.outcome = outcome


class Proxy:
    """Stands in for the candidate inside trusted test code; every call crosses a pipe."""

    def __init__(self, session, who: str) -> None:
        self.session, self.who = session, who
        self.failure: dict | None = None

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError("keyword arguments are not passed to the candidate")
        outcome = self.session.call(self.who, wire.encode(list(args)))
        if outcome["status"] == "ok":
            return wire.decode(outcome["value"])
        if outcome["status"] == "error":
            raise _rebuild(outcome)
        self.failure = self.failure or outcome
        raise CandidateFailure(outcome)

    def step(self, src: str, ns: dict) -> dict:
        self.failure = None
        try:
            exec(compile(src, "<test>", "exec"), ns)
            outcome = {"status": "ok", "detail": ""}
        except CandidateFailure as exc:
            outcome = exc.outcome
        except Exception as exc:  # noqa: BLE001 - a candidate error or a test error is a failure
            outcome = getattr(exc, "_whet_outcome", None) or _test_failure(exc)
        return self.failure or outcome


def _test_failure(exc: Exception) -> dict:
    """What an exception raised by the trusted test code itself means."""
    if isinstance(exc, AssertionError):
        return {"status": "fail", "detail": f"assertion failed{': ' + str(exc) if str(exc) else ''}"}
    if isinstance(exc, ImportError):
        return {"status": "infra", "detail": f"test code cannot import: {exc}"}
    return {"status": "fail", "detail": f"{type(exc).__name__}: {exc}"[:500]}


def _rebuild(outcome: dict) -> Exception:
    """The candidate's exception as one of the same built-in type, so tests can expect it."""
    kind = getattr(builtins, outcome.get("etype", ""), None)
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        kind = RuntimeError
    try:
        exc = kind(outcome["detail"][-300:])
    except Exception:  # noqa: BLE001 - exceptions with odd constructors
        exc = RuntimeError(outcome["detail"][-300:])
    exc._whet_outcome = outcome
    return exc
