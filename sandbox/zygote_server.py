"""The warm Python zygote: runs inside the python environment tree, pre-forks one sandbox per slot.

Consumes, on a unix SEQPACKET socket (argv[1] is its fd), one message per slot: the slot
index and the slot's channel fd; forks a resident per slot, which pre-forks a sandbox per
"prep" (the process tree: `serve`). The zygote never sees job data (only fds), so nothing of
one job can be found by the next in its memory. Stdlib only: it runs on the environment's
python3, not the executor's. Single-threaded.
It does NOT decide limits or statuses: the host side (`sandbox.zygote`) does.
"""

import ctypes
import json
import os
import resource
import signal
import socket
import struct
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG = 38, 1
PRELOAD = ("unittest", "json", "re", "collections", "itertools", "functools", "math",
           "dataclasses", "typing", "traceback", "io", "random", "string", "heapq", "bisect",
           "decimal", "fractions", "statistics", "datetime", "textwrap", "copy", "runpy",
           "argparse", "csv", "pathlib", "doctest", "inspect", "ast", "pytest")

libc = ctypes.CDLL(None, use_errno=True)


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src, target, fstype, flags, data=None):
    _check(libc.mount(src.encode(), target.encode(), fstype.encode() if fstype else None,
                      ctypes.c_ulong(flags), data.encode() if data else None), f"mount {target}")


def umount(target):
    _check(libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def loopback_up():
    SIOCSIFFLAGS, IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x8914, 0x1, 0x8, 0x40
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING, b""))


def set_up_namespaces(slot):
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS),
           "unshare")
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    for place in ("/tmp", "/dev/shm"):
        mount("tmpfs", place, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=1777")
    folder = f"/.whet/slot{slot}"
    mount(folder, "/work", None, MS_BIND)
    mount(folder, "/work", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    socket.sethostname("sandbox")
    loopback_up()


def receive_job(channel, slot):
    """C: wait for the job's fds, read its request, finish the sandbox as root."""
    msg, anc, _, _ = channel.recvmsg(16, socket.CMSG_SPACE(4 * 4))
    if not msg:
        os._exit(0)
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4]))
    with open(f"/.whet/slot{slot}.request.json") as f:
        req = json.load(f)
    size = f"size={req['disk_bytes']},mode=1777"
    for place in ("/tmp", "/dev/shm"):
        mount("tmpfs", place, None, MS_REMOUNT | MS_NOSUID | MS_NODEV, size)
    umount("/.whet")
    umount("/sys")
    return req, fds


def drop_privileges(req, fds):
    for res, value in req["rlimits"].items():
        resource.setrlimit(getattr(resource, res), (value, value))
    for target, fd in enumerate(fds[:4]):
        os.dup2(fd, target, inheritable=True)
    os.closerange(4, 65536)
    uid = req["uid"]
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    os.chdir("/work")
    os.umask(0o022)
    os.environ.clear()
    os.environ.update(req["env"])


FLAGS = ("-I", "-S", "-s", "-P", "-u", "-B", "-E")
"Interpreter flags the warm path reproduces (the host side sends nothing else here)."


def emulate_flags(flags, path0):
    """Make this forked interpreter look as if started with `flags`: -I/-P keep the script's
    folder off sys.path, -S takes site/dist-packages (and modules loaded from them) away."""
    del sys.path[0]  # the zygote's own folder
    if not ({"-I", "-P"} & set(flags)):
        sys.path.insert(0, path0)
    if "-S" in flags:
        gone = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
        sys.path[:] = [p for p in sys.path if p not in gone]
        for name, module in list(sys.modules.items()):
            where = getattr(module, "__file__", None) or ""
            if any(where.startswith(p) for p in gone):
                del sys.modules[name]
    sys.dont_write_bytecode = True


def reopen_stdio():
    import io

    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                  line_buffering=True, write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True, write_through=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def run_python(argv):
    """Run `python3 [FLAGS] -c CODE | -m MOD | SCRIPT` in this process; never returns."""
    import atexit
    import runpy
    import traceback
    import types

    reopen_stdio()
    flags = []
    for arg in argv[1:]:  # only the interpreter's own flags, before -c/-m/script: the
        if arg not in FLAGS:  # program's arguments may hold '-s' too (unittest's -s DIR)
            break
        flags.append(arg)
    mode, target, rest = argv[1 + len(flags)], "", argv[2 + len(flags):]
    code = 0
    try:
        if mode == "-c":
            target, rest = rest[0], rest[1:]
            emulate_flags(flags, "")
            sys.argv = ["-c", *rest]
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)
        elif mode == "-m":
            target, rest = rest[0], rest[1:]
            emulate_flags(flags, os.getcwd())
            sys.argv = [target, *rest]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            emulate_flags(flags, os.path.dirname(os.path.abspath(mode)))
            sys.argv = [mode, *rest]
            runpy.run_path(mode, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # noqa: BLE001 - a script's uncaught error, printed as python does
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


def exec_command(argv):
    """Become the job's command: a fresh process image, as under bubblewrap."""
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):  # Python changed these
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
        os._exit(127 if exc.errno == 2 else 126)


def supervise(child):
    """pid 1 of the job's namespace: reap everything, exit as `child` did."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == child:
            if os.WIFSIGNALED(status):
                os._exit(128 + os.WTERMSIG(status))
            os._exit(os.WEXITSTATUS(status))


def prepare(slot, channel_fd):
    """Process A: build the sandbox, fork B (pid 1), report readiness and how it ended."""
    channel = socket.socket(fileno=channel_fd)
    try:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # dies with its slot resident
        set_up_namespaces(slot)
        b = os.fork()
        if b == 0:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # and takes its namespace along
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            c = os.fork()
            if c == 0:
                try:
                    req, fds = receive_job(channel, slot)
                except OSError:  # the host dropped this sandbox unused
                    os._exit(0)
                drop_privileges(req, fds)
                if req["in_process"]:
                    run_python(req["argv"])
                exec_command(req["argv"])
            channel.close()
            supervise(c)
        tell(channel, "ready")
    except BaseException as exc:  # noqa: BLE001 - reported to the host as a sandbox failure
        tell(channel, f"error {exc!r}")
        os._exit(0)
    _, code = os.waitpid(b, 0)
    tell(channel, f"exit {os.waitstatus_to_exitcode(code)}")
    os._exit(0)


def tell(channel, line):
    try:
        channel.send(line.encode() + b"\n")
    except OSError:
        pass  # the host is gone or gave up on this sandbox; the cgroup reaps us


def receive_fd(sock):
    """One message and the fd that came with it (None when the peer closed)."""
    msg, anc, _, _ = sock.recvmsg(16, socket.CMSG_SPACE(4))
    if not msg:
        return None, None
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4]))
    return msg, (fds[0] if fds else None)


def resident(slot, channel_fd, cgroup_procs):
    """Process S: join the slot cgroup once, then pre-fork a sandbox per "prep"."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # dies with the zygote
    channel = socket.socket(fileno=channel_fd)
    for path in cgroup_procs:
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    channel.send(f"ready {os.getpid()}".encode())
    while True:
        try:
            msg, fd = receive_fd(channel)
        except OSError:
            os._exit(0)
        if msg is None:
            os._exit(0)
        if fd is None:
            continue
        if os.fork() == 0:
            channel.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            prepare(slot, fd)
        os.close(fd)


def serve(sock, cgroup_procs):
    """Fork the resident of each slot the host sends. The process tree:

      S  the slot's resident: it joins the slot cgroup once (a cgroup join waits for an RCU grace
         period under a global lock; children are born in their parent's cgroup for free), says
         'ready <pid>' and then serves "prep" messages on the slot channel, each with one fd: the
         sandbox's end of a fresh channel to the host. For each it forks
      A  which unshares pid/mount/net/ipc/uts namespaces, mounts fresh tmpfs on /tmp and
         /dev/shm, binds the slot folder read-only at /work, then forks
      B  pid 1 of the new pid namespace: mounts its /proc, forks C, reaps, exits with C's status
         (the kernel then kills whatever is left, setsid orphans included), and
      C  which waits on the channel for the job: four fds (stdin, stdout, stderr, report) as
         SCM_RIGHTS. It reads the request file, resizes the tmpfs, hides the slot folders, the
         request and the cgroup tree, sets rlimits, drops to the slot uid with no_new_privs and no
         capabilities, and either runs `python3 [flags] -c/-m/script` in-process on the
         preloaded modules (the warm path) or execs the command (a fresh process image).

    A writes 'ready' on the channel once the sandbox waits, then 'exit N' (N as a shell reports
    it: 128+signal) when B ended, or 'error ...'; the channel's EOF means A is gone."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the zygote never waits for its children
    while True:
        try:
            msg, fd = receive_fd(sock)
        except InterruptedError:
            continue
        if msg is None:
            return
        if fd is None:
            continue
        slot = int(msg)
        if os.fork() == 0:
            sock.close()
            resident(slot, fd, cgroup_procs[str(slot)])
        os.close(fd)


def main():
    """Preload the warm modules, say 'ready' on the socket, and serve until the host closes it."""
    sock = socket.socket(fileno=int(sys.argv[1]))
    with open("/.whet/zygote.json") as f:
        cgroup_procs = json.load(f)["cgroup_procs"]
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    sock.send(b"ready")
    serve(sock, cgroup_procs)


if __name__ == "__main__":
    main()
