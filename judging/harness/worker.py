"""Host one program (the candidate, or the trusted reference) for the harness, over two pipes.

Run by `harness.py` as `python3 -P -s worker.py MODE FD_IN FD_OUT MEMORY_MB REPORT_FD`.
Consumes JSON-line requests on FD_IN: `load` (source and entry point), `call` (encoded
arguments) or `script` (run the source as __main__ on the real stdin); produces one JSON
line per request on FD_OUT: an encoded return value, an error with its traceback, an exit
code, or a refusal to encode. Every answer carries `audit`: suspicious things the program did
(opening the harness directory or another process's /proc, writing there, signalling another
process, opening the report descriptor) and `patched`: built-ins it replaced.

Before a candidate runs a line, this process denies itself (Landlock, no-new-privs, where the
kernel has them) reading anything outside the system's library paths and its own scratch
directory: the harness files, the job directory and /proc of other processes are out of
reach, and signals to processes outside (the harness) are refused. It never sees tests or
expected values: those stay in the harness process. It does NOT judge anything.
"""

from __future__ import annotations

import builtins
import json
import linecache
import os
import resource
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wire  # noqa: E402  (the codec beside this file; sys.path has no job dir otherwise)

sys.path.remove(HERE)

_SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
_TREE_WRITES = ("os.remove", "os.rename", "os.replace", "os.rmdir", "os.chmod", "os.chown",
                "os.truncate", "os.utime", "shutil.rmtree", "os.link", "os.symlink", "os.mkdir")
_LISTS = ("os.listdir", "os.scandir")
_KILLS = ("os.kill", "os.killpg", "signal.pthread_kill")


# --- Landlock ------------------------------------------------------------------------------

def landlock(scratch: str) -> str:
    """Restrict this process to the system paths (read) and `scratch` (all); say what held."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, VERSION)
    if abi < 1:
        return f"unavailable (errno {ctypes.get_errno()})"
    fs_all = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0) \
        | (1 << 15 if abi >= 5 else 0)
    fields = [fs_all]
    if abi >= 4:
        fields.append(0b11)  # TCP bind and connect, with no rule allowing any
    if abi >= 6:
        fields.append(0b11)  # scope abstract unix sockets and signals to this domain
    attr = (ctypes.c_uint64 * len(fields))(*fields)
    ruleset = libc.syscall(444, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if ruleset < 0:
        return f"unavailable (create failed, errno {ctypes.get_errno()})"
    read_dir = 1 | 4 | 8  # execute, read file, read dir
    file_rw = 2 | 4 | (1 << 14 if abi >= 3 else 0)
    rules = [(p, read_dir) for p in _readable_roots()] + [(d, file_rw) for d in _DEVICES]
    rules.append((scratch, fs_all))
    for path, access in rules:
        _add_rule(libc, ruleset, path, access)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    if libc.syscall(446, ruleset, 0) != 0:  # landlock_restrict_self
        return f"failed (errno {ctypes.get_errno()})"
    os.close(ruleset)
    return f"abi {abi}"


def _readable_roots() -> list[str]:
    roots = set(_SYSTEM_PATHS) | {sys.prefix, sys.base_prefix, sys.exec_prefix}
    roots |= {p for p in sys.path if p and os.path.exists(p)}
    return sorted(p for p in roots if not _inside(HERE, p) and os.path.exists(p))


def _add_rule(libc, ruleset: int, path: str, access: int) -> None:
    import ctypes
    import struct

    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            access &= 1 | 2 | 4 | (1 << 14) | (1 << 15)  # rights that apply to files
        attr = ctypes.create_string_buffer(struct.pack("=Qi", access, fd), 12)
        libc.syscall(445, ruleset, 1, attr, 0)  # LANDLOCK_RULE_PATH_BENEATH
    finally:
        os.close(fd)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


# --- audit ---------------------------------------------------------------------------------

class Audit:
    """Records what a candidate did that no honest solution needs to."""

    def __init__(self, report_fd: int) -> None:
        self.report_fd = report_fd
        self.events: list[str] = []
        self.pid = os.getpid()

    def __call__(self, event: str, args: tuple) -> None:
        if len(self.events) >= 32:
            return
        if event == "open":
            self._open(args[0], args[1] or "", args[2] or 0)
        elif event in _TREE_WRITES or event in _LISTS:
            path = self._path(args[0]) if args else None
            if path and _inside(path, HERE):
                kind = "listed" if event in _LISTS else "tampered"
                self.events.append(f"{kind}: {event} {path}")
        elif event in _KILLS and args and args[0] not in (0, self.pid):
            self.events.append(f"signalled: {event} {args[0]}")

    def _open(self, target, mode, flags) -> None:
        if isinstance(target, int):
            if target == self.report_fd:
                self.events.append(f"report_fd: opened descriptor {target}")
            return
        path = self._path(target)
        if path is None:
            return
        writing = any(c in str(mode) for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR)
        if _inside(path, HERE):
            self.events.append(f"{'tampered' if writing else 'read_verifier'}: open {path}")
        elif path.startswith("/proc/") and not path.startswith(("/proc/self/", f"/proc/{self.pid}/")):
            self.events.append(f"read_verifier: open {path}")
        elif path.endswith(f"/fd/{self.report_fd}"):
            self.events.append(f"report_fd: open {path}")

    @staticmethod
    def _path(target):
        if isinstance(target, bytes):
            target = target.decode(errors="replace")
        if not isinstance(target, str):
            return None
        return os.path.normpath(target if target.startswith("/") else os.path.abspath(target))

    def drain(self) -> list[str]:
        out, self.events = self.events, []
        return out


# --- serving -------------------------------------------------------------------------------

class Worker:
    def __init__(self, mode: str, fd_out: int, audit: Audit | None) -> None:
        self.mode = mode
        self.fd_out = fd_out
        self.audit = audit
        self.fn = None
        self.builtins = dict(vars(builtins))

    def answer(self, reply: dict) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        reply["audit"] = self.audit.drain() if self.audit else []
        reply["patched"] = self._patched()
        data = (json.dumps(reply, separators=(",", ":")) + "\n").encode()
        while data:
            data = data[os.write(self.fd_out, data):]

    def _patched(self) -> list[str]:
        now = vars(builtins)
        changed = [k for k, v in self.builtins.items() if now.get(k) is not v]
        return sorted(changed + [k for k in now if k not in self.builtins])[:16]

    def handle(self, req: dict) -> None:
        try:
            reply = getattr(self, "op_" + req["op"])(req)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            reply = {"exit": code}
        except BaseException as exc:  # noqa: BLE001 - anything the program raised is data
            reply = _error(exc)
        self.answer(reply)

    def op_load(self, req: dict) -> dict:
        namespace = {"__name__": "solution", "__builtins__": builtins}
        filename = req.get("filename", "solution.py")
        _remember_source(filename, req["source"])
        code = compile(req["source"], filename, "exec")
        exec(code, namespace)
        fn = namespace.get(req["entry"])
        if not callable(fn):
            return {"ok": False, "etype": "NameError", "error": f"{req['entry']!r} is not defined",
                    "tb": ""}
        self.fn = fn
        return {"ok": True}

    def op_call(self, req: dict) -> dict:
        args = wire.decode(req["args"])
        value = self.fn(*args)
        try:
            return {"ok": True, "value": wire.encode(value)}
        except wire.Unencodable as exc:
            return {"unencodable": str(exc), "eq_override": wire.overrides_eq(value)}

    def op_script(self, req: dict) -> dict:
        sys.argv = [req.get("filename", "solution.py")]
        _remember_source(sys.argv[0], req["source"])
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        exec(compile(req["source"], sys.argv[0], "exec"), namespace)
        return {"exit": 0, "finished": True}  # ran to its end (a SystemExit answers without this)


def _error(exc: BaseException) -> dict:
    # Frames of this file are left out: they say nothing about the program, and looking up
    # their lines would read this directory (an audit false positive).
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _inside(f.filename, HERE)]
    tb = "".join(traceback.format_list(frames[-6:]))
    tb += "".join(traceback.format_exception_only(type(exc), exc))
    return {"ok": False, "etype": type(exc).__name__, "error": str(exc)[:500], "tb": tb[-2000:]}


def _remember_source(filename: str, source: str) -> None:
    """Let tracebacks show the program's lines without opening any file."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def main() -> None:
    mode, fd_in, fd_out, memory_mb, report_fd = sys.argv[1], *map(int, sys.argv[2:6])
    scratch = os.getcwd()
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    audit = None
    status = "not applied"
    for name in (__file__, wire.__file__):
        linecache.getlines(name)  # cached now, so no traceback opens them later
    if mode == "candidate":
        status = landlock(scratch)
        audit = Audit(report_fd)
        sys.addaudithook(audit)
    worker = Worker(mode, fd_out, audit)
    worker.answer({"hello": True, "landlock": status})
    requests = os.fdopen(fd_in, "rb", buffering=0)
    for line in iter(requests.readline, b""):
        req = json.loads(line)
        worker.handle(req)
        if req["op"] == "script":
            break
    sys.stdout.flush()


if __name__ == "__main__":
    main()
