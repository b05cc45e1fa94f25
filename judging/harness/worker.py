"""Host one program (the candidate, or the trusted reference) for the harness, over two pipes.

Run by `harness.py` as `python3 -P -s worker.py MODE FD_IN FD_OUT MEMORY_MB REPORT_FD NS`.
Consumes JSON-line requests on FD_IN (`load`, `call`, `script`, `ping`, each with a `seq`);
produces exactly one JSON line per request on FD_OUT, echoing its `seq`: an encoded value,
an error, an exit code, a refusal to encode or a pong; each carries `audit` (suspicious
things the program did) and `patched` (built-ins it replaced).

A candidate worker (NS = its RLIMIT_NPROC, or -1 for none) first enters a user and PID
namespace of its own (`isolate`): it forks, the child is pid 1 there with no capabilities
and the parent only relays its exit, so the candidate cannot name the harness or the
reference, and all it forks dies with it. Then Landlock and no-new-privs confine it to its
scratch directory and the system paths. It never sees tests or expected values. It does
NOT judge anything.
"""

from __future__ import annotations

import builtins
import ctypes
import json
import linecache
import os
import resource
import signal
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


# --- namespaces ----------------------------------------------------------------------------

CLONE_NEWUSER, CLONE_NEWPID = 0x10000000, 0x20000000
INNER_ID = 1000
"The candidate's uid and gid inside its namespace: not 0, so it holds no capabilities there."
NS_FAILED = 75
"Exit code of a worker told to isolate (the job's earlier ones did) that could not."


def isolate(fd_out: int, nproc: int) -> str:
    """Move the candidate into a user and PID namespace of its own; 'pidns' or 'shared: why'.

    The calling process stays outside as a relay: it tells the harness the child's pid
    (as the harness sees it), lets the child go on, and exits as the child did."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0:
        err = ctypes.get_errno()
        return f"shared: unshare failed ({os.strerror(err)})"
    for name, text in (("setgroups", "deny"), ("uid_map", f"{INNER_ID} {uid} 1"),
                       ("gid_map", f"{INNER_ID} {gid} 1")):
        try:
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        except OSError:
            pass  # unmapped ids still hold no capability outside; the namespace still holds
    go_r, go_w = os.pipe()
    try:
        child = os.fork()
    except OSError as exc:
        return f"shared: fork into the namespace failed ({exc.strerror})"
    if child == 0:
        os.close(go_w)
        os.read(go_r, 1)  # the harness learns this pid before this side writes anything
        os.close(go_r)
        _confine(libc, nproc)
        return "pidns"
    os.close(go_r)
    _write(fd_out, json.dumps({"seq": 0, "ns_pid": child}).encode() + b"\n")
    os.close(go_w)
    _relay(child)


def _confine(libc, nproc: int) -> None:
    """Inside the namespace: become its uid 1000 without capabilities, fork-limited, the
    first the OOM killer takes."""
    os.setsid()  # out of the relay's process group: kill(0, ...) cannot reach it
    try:
        os.setresgid(INNER_ID, INNER_ID, INNER_ID)
        os.setresuid(INNER_ID, INNER_ID, INNER_ID)
    except OSError:
        pass
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all empty
    libc.syscall(126, ctypes.byref(header), ctypes.byref(data))  # capset
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    if nproc > 0:
        # Counted per (namespace, uid): the candidate's own processes, nobody else's.
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _relay(child: int) -> None:
    """The outside half: hold nothing of the candidate's, wait, and end as the child ended."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, 1 << 16)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 70)


def _write(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


# --- audit ---------------------------------------------------------------------------------

class Audit:
    """Records what a candidate did that no honest solution needs to."""

    def __init__(self, report_fd: int) -> None:
        self.report_fd = report_fd
        self.events: list[str] = []
        self.pid = os.getpid()
        try:
            self.proc_pid = int(os.readlink("/proc/self"))  # its number in /proc (outside its namespace)
        except (OSError, ValueError):
            self.proc_pid = self.pid

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
        elif event in _KILLS and args and args[0] != self.pid:
            # 0 too: a process group, or the parent outside a namespace (getppid() is 0 there)
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
        elif path.startswith("/proc/") and not path.startswith(("/proc/self/", f"/proc/{self.proc_pid}/")):
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
    """The candidate's (or reference's) worker: loads the code, then answers the harness's operations."""

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
        reply["seq"] = req["seq"]
        self.answer(reply)

    def op_ping(self, req: dict) -> dict:
        """The barrier after an answer: every line written before this one is in the pipe."""
        return {"pong": True}

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
    out = {"ok": False, "etype": type(exc).__name__, "error": str(exc)[:500], "tb": tb[-2000:]}
    if isinstance(exc, ImportError) and isinstance(exc.name, str):
        out["module"] = exc.name[:200]
    return out


def _remember_source(filename: str, source: str) -> None:
    """Let tracebacks show the program's lines without opening any file."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def main() -> None:
    mode, fd_in, fd_out, memory_mb, report_fd = sys.argv[1], *map(int, sys.argv[2:6])
    ns = sys.argv[6] if len(sys.argv) > 6 else "-"
    scratch = os.getcwd()
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    audit = None
    status, isolation = "not applied", None
    for name in (__file__, wire.__file__):
        linecache.getlines(name)  # cached now, so no traceback opens them later
    if mode == "candidate":
        if ns != "-":
            isolation = isolate(fd_out, int(ns.rstrip("!")))
            if ns.endswith("!") and isolation != "pidns":
                os._exit(NS_FAILED)  # the job's other workers had one: no weaker fallback
        status = landlock(scratch)
        audit = Audit(report_fd)
        sys.addaudithook(audit)
    else:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no /proc/<pid>/mem for same-uid peers
    worker = Worker(mode, fd_out, audit)
    hello = {"seq": 0, "hello": True, "landlock": status}
    if isolation is not None:
        hello["isolation"] = isolation
    worker.answer(hello)
    requests = os.fdopen(fd_in, "rb", buffering=0)
    for line in iter(requests.readline, b""):
        req = json.loads(line)
        worker.handle(req)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
