"""A slot's spawner: lives in the slot's cgroup and starts each cold job's launcher from there.

Run by the host's /usr/bin/python3 (-I -S, stdlib only) after its launcher joined the slot
cgroup; argv[1] is the fd of a unix SEQPACKET socket to the executor, argv[2] the request
file. Consumes one message per job (`main`) and execs bubblewrap for it (`launch`). It
answers nothing: bubblewrap's status pipe tells the executor when the sandbox started and
how it ended. Why it exists: joining a cgroup (writing cgroup.procs) waits for an RCU grace
period under a global lock, which capped the whole host at a few dozen sandbox starts per
second; children of a process already in the cgroup are born there, so the join happens
once per slot. It does NOT watch, kill or account for jobs: the executor does.
"""

import ctypes
import json
import os
import resource
import signal
import socket
import struct
import sys


PR_SET_NO_NEW_PRIVS = 38
LIBC = ctypes.CDLL(None, use_errno=True)


def launch(request, fds):
    """Fork; in the child set the rlimits, put the fds at 0-4, drop to the slot's uid and gid
    with no supplementary groups and no_new_privs (what `setpriv` would do, without its exec),
    and exec the argv (bubblewrap)."""
    pid = os.fork()
    if pid:
        return
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an ignored SIGCHLD survives exec
        for name, value in request["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (value, value))
        for target, fd in enumerate(fds):
            os.dup2(fd, target, inheritable=True)
        os.closerange(len(fds), 65536)
        os.setsid()
        uid = request["uid"]
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # leaving uid 0 clears every capability
        if LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "no_new_privs")
        os.execv(request["argv"][0], request["argv"])
    finally:
        os._exit(127)


def main():
    """Say 'ready <pid>', then launch a job per message: five fds as SCM_RIGHTS (stdin, stdout,
    stderr, the fd-3 report channel, bubblewrap's status pipe); the request file then holds JSON
    `{"argv": [...], "rlimits": {...}, "uid": N}` (a file: argv may exceed a socket message)."""
    channel = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # launched jobs are reaped by the kernel
    channel.send(f"ready {os.getpid()}".encode())
    while True:
        msg, anc, _, _ = channel.recvmsg(16, socket.CMSG_SPACE(5 * 4))
        if not msg:
            return
        fds = []
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4]))
        try:
            with open(sys.argv[2]) as f:
                launch(json.load(f), fds)
        finally:
            for fd in fds:
                os.close(fd)


if __name__ == "__main__":
    main()
