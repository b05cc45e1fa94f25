"""The error tree of whetstone, in one place (`WhetError` draws it).

Consumes nothing and produces nothing: every package raises from here. The tree lives in
`bus/` because `bus` is the bottom layer that every other package imports, so nothing has
to import upwards to raise a shared error. Expected outcomes are not errors: a program that
timed out is an `ExecutionResult` with a `timeout` status, never a raised exception.
"""

from __future__ import annotations


class WhetError(Exception):
    """Base of every error whetstone raises on purpose. The tree:

        WhetError
        ├── ConfigError          a config file or value is wrong (names file, key, expectation)
        ├── WireError            a payload cannot become a message
        │   ├── MalformedMessage     not MessagePack, or fields of the wrong shape
        │   └── SchemaMismatch       a known message type at a version this build does not read
        ├── BusError             the bus could not do what was asked
        │   ├── BusUnavailable       no server answered within the deadline
        │   ├── PermissionDenied     the server refused this user's login, publish or subscribe
        │   ├── TlsFailed            a certificate is missing, expired or from another CA
        │   ├── ObjectMissing        no object of that name (never stored, or pruned)
        │   └── ObjectCorrupt        a stored object's checksum does not match
        ├── RunError             a run directory or stack is missing or in the wrong state
        │   ├── ActorFailed          a kind crashed again and again before it was ready
        │   └── StackStopped         the supervisor stopped on an error (its last line)
        ├── InputError           a user-supplied file (tasks, attempts) has a bad record
        ├── SandboxUnavailable   this machine lacks what a sandbox backend needs (a tool, a tree)
        └── EndpointError        a model endpoint cannot be reached or gave no usable answer"""


class ConfigError(WhetError):
    """A config file or value is invalid; the message names the file, key and expectation."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {problem}")


class WireError(WhetError):
    """A payload could not be turned into the message type its subject carries."""

    reason = "wire_error"


class MalformedMessage(WireError):
    """The payload is not MessagePack, or its fields do not match the schema."""

    reason = "malformed"


class SchemaMismatch(WireError):
    """The payload names a message type or version this build does not read."""

    reason = "schema_mismatch"


class BusError(WhetError):
    """The bus could not complete an operation."""


class BusUnavailable(BusError):
    """No NATS server answered within the operation's deadline."""


class PermissionDenied(BusError):
    """The server refused a login, or a publish or subscribe the user's role does not allow."""


class TlsFailed(BusError):
    """TLS could not be set up: a certificate or key file is missing or unreadable, or one
    side refused the other's certificate (expired, another CA, no client certificate)."""


class ObjectMissing(BusError):
    """No object of that name is in the store (never stored, or pruned since)."""


class ObjectCorrupt(BusError):
    """An object read back from the object store does not match its recorded checksum."""


class RunError(WhetError):
    """A run directory or running stack is missing, or in a state the command cannot use."""


class ActorFailed(RunError):
    """An actor kind crashed `supervisor.crash_loop_limit` times in a row before it was
    ready, so the stack stopped; the message names the kind, the cause and its log."""

    exit_code = 1


class StackStopped(RunError):
    """The stack's supervisor stopped on an error that was not whetstone's own; the message
    is the exception's last line and where its traceback is."""

    exit_code = 1


class InputError(WhetError):
    """A user-supplied file has a bad record; the message names the file, line and field
    (line 0: the whole file)."""

    def __init__(self, source: str, line: int, field: str, problem: str) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.problem = problem
        where = (f"{source}:{line}" if line else source) + (f": {field}" if field else "")
        super().__init__(f"{where}: {problem}")


class EndpointError(WhetError):
    """An OpenAI-compatible model endpoint (`whet eval --endpoint`) could not be reached or
    gave no usable answer; the message names the URL, the cause and what to check."""


class SandboxUnavailable(WhetError, RuntimeError):
    """A sandbox backend cannot open on this machine (bubblewrap missing, no Docker engine, an
    environment tree not built); the message names what is missing and the fix. A RuntimeError
    too, for the callers that caught the backend's failure to open as one."""
