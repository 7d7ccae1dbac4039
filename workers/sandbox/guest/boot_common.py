"""What the two in-sandbox servers share: the fork server (``fork_server_main``) and the docker entry server
(``docker_entry_main``). Standard library only, like them: it runs on the sandbox's own python3.

Spliced into each server's program where the server imports from it (``workers.sandbox.guest_source``), so the
server and this code run in ONE globals dict: this module must not define a name a server defines too (unless
it is the same constant: a test checks).
"""

from __future__ import annotations

import array
import builtins
import collections
import ctypes
import fcntl
import functools
import gc
import io
import json
import marshal
import math
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
import types

from workers.sandbox.guest.as_main import main_status

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

#: Imported up front for the in-process harness (``FAST_FLAGS``): a forked run finds them loaded.
PRELOADED = (builtins, collections, functools, io, json, marshal, math, select, time, traceback, types)

PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
#: What both servers unshare and mount with.
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SETUP_FAILED = 125
FAST_FLAGS = ("-I", "-S", "-B")

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
libc = ctypes.CDLL(None, use_errno=True)


class SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def ok(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, what + ": " + os.strerror(err))


def prctl(option: int, arg: int) -> None:
    ok(libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def loopback_up() -> None:
    """A new network namespace has only ``lo``, down; bring it up (as bwrap does) so local servers work."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))
        flags = struct.unpack("16sH22x", ifr)[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
    finally:
        sock.close()


_PRIVATE_NEWNS = 0x00020000
_PROC_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC
_REC_PRIVATE = 0x4000 | (1 << 18)  # MS_REC | MS_PRIVATE
#: The number of TCP hash buckets a network namespace created from the caller's gets of its own (0, the
#: default, shares the host's whole table: every read of the namespace's /proc/net/tcp then walks all of it).
CHILD_TCP_HASH = "4096"


def with_private_proc(report_fd: int, body: Callable[[], None]) -> None:
    """Run ``body`` in a throwaway child with a mount namespace and a procfs of its own on /proc (the caller's
    /proc/sys is read-only under bwrap and docker), in every other namespace of the caller; ``OSError`` if it
    fails (the child says why on ``report_fd``)."""

    def child() -> int:
        ok(libc.unshare(_PRIVATE_NEWNS), "unshare mount")
        ok(libc.mount(None, b"/", None, ctypes.c_ulong(_REC_PRIVATE), None), "make / private")
        ok(libc.mount(b"proc", b"/proc", b"proc", ctypes.c_ulong(_PROC_FLAGS), None), "mount proc")
        body()
        return 0

    pid = os.fork()
    if pid == 0:
        exit_with(report_fd, child)
    if os.waitpid(pid, 0)[1] != 0:  # PEP 475: retried on EINTR
        raise OSError("a private helper failed")


def open_in_private_proc(path: str, flags: int = os.O_WRONLY) -> int:
    """An fd opened with ``flags`` on ``path`` of a private procfs (see ``with_private_proc``), for the caller
    to keep: a sysctl whose handler acts on the writer's namespace at write time, or ``/proc/sys`` itself."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    def send() -> None:
        fd = os.open(path, flags)
        theirs.sendmsg([b"fd"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])

    try:
        with_private_proc(2, send)
        _, ancdata, _, _ = ours.recvmsg(2, socket.CMSG_SPACE(array.array("i").itemsize))
    finally:
        ours.close()
        theirs.close()
    received = array.array("i")
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            received.frombytes(data[: received.itemsize])
    if len(received) != 1:
        raise OSError("no fd for " + path)
    return received[0]


def child_netns_own_tcp_hash() -> None:
    """Network namespaces created from the caller's (one per run) get a TCP hash table of their own (kernels
    before 6.1 have no such sysctl: there the watch's table reads just cost more)."""
    path = "/proc/sys/net/ipv4/tcp_child_ehash_entries"
    if not os.path.exists(path):
        return
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, CHILD_TCP_HASH.encode())
    finally:
        os.close(fd)


#: What every run's own network namespace is set to, written per run by its supervisor (``limit_run_netns``).
#: A fresh namespace copies the host's ``tcp_rmem`` (here up to 32 MiB) and has the kernel's defaults for the
#: rest. Why: a TCP connection nobody has accepted yet is charged to no cgroup (the memory cgroup is attached at
#: accept()) and queues up to its receive buffer; with SO_RCVBUF a no-op (``seccomp``) that buffer is
#: ``tcp_rmem``'s default, so each pending connection holds a few KiB, and a listener at most ``somaxconn`` + 1
#: of them (``socket_watch`` bounds the number of sockets). Honest programs keep working: autotuning grows a
#: socket that is read up to ``tcp_rmem``'s max (1 MiB: bulk loopback transfers moved 0.3-1.3 GB/s with these
#: sizes and with the host's 128 KiB / 32 MiB alike, side by side), and an accept queue of 64 absorbs a burst of 64
#: simultaneous connects (a listener's SYN queue is bounded by the same backlog: with syncookies on, as in every
#: new namespace, ``tcp_max_syn_backlog`` plays no part). ``optmem_max`` (socket option memory,
#: ``sock_kmalloc``, uncharged) back to the pre-6.9 default. Cost: ~0.1 ms per run, most of it the first
#: look-up in the namespace's fresh sysctl tree.
RUN_NETNS_SYSCTLS = (
    ("net/ipv4/tcp_rmem", "4096 4096 1048576"),
    ("net/core/somaxconn", "64"),
    ("net/core/optmem_max", "20480"),
)


def open_private_proc_sys() -> int:
    """A directory fd of ``/proc/sys`` in a private, writable procfs, for a server to keep: through it each
    supervisor writes its run's namespace sysctls (``limit_run_netns``) in ~0.1 ms, with no helper
    process per run. Only a directory fd of ``/proc/sys`` itself (or ``/proc/sys/net``) resolves ``net/...``
    in the network namespace of the process that looks it up; one of a deeper directory (``net/ipv4``) stays
    bound to the namespace it was opened in. It never reaches a run: each supervisor closes it."""
    return open_in_private_proc("/proc/sys", os.O_RDONLY | os.O_DIRECTORY)


def limit_run_netns(proc_sys: int, server_netns: str) -> None:
    """A supervisor, right after unsharing its run's network namespace: ``RUN_NETNS_SYSCTLS`` through
    ``proc_sys`` (``open_private_proc_sys``). Refuses while still in ``server_netns`` (the server's own). A
    name missing from the namespace is not a namespace's own on this kernel (``optmem_max`` before 6.9: only
    the host's namespace lists those) and is left alone."""
    if os.readlink("/proc/self/ns/net") == server_netns:
        raise OSError("refusing to set the sysctls of the server's own network namespace")
    for name, value in RUN_NETNS_SYSCTLS:
        try:
            fd = os.open(name, os.O_WRONLY, dir_fd=proc_sys)
        except FileNotFoundError:
            continue
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)


def program_fds(fds: list[int]) -> None:
    """First thing in a run's program (H): a session of its own, the run's stdin, stdout and stderr
    (``fds[1:4]``) as fds 0-2, and no other fd open."""
    os.setsid()
    for target, fd in enumerate(fds[1:4]):
        os.dup2(fd, target)
    os.closerange(3, 1 << 16)


def stdin_from_devnull() -> None:
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def parse_spec(blob: bytes) -> dict[str, Any]:
    """Header line (JSON) + the raw bytes of every file, in header order."""
    nl = blob.index(b"\n")
    spec: dict[str, Any] = json.loads(blob[:nl])
    pos = nl + 1
    files = []
    for name, size in spec["files"]:
        parts = name.split("/")
        if name.startswith("/") or not parts or ".." in parts or "" in parts or "." in parts:
            raise ValueError("bad file name " + repr(name))
        files.append((parts, blob[pos : pos + size]))
        pos += size
    spec["files"] = files
    return spec


def set_oom_score_adj(value: int) -> None:
    """Best effort (lowering it needs CAP_SYS_RESOURCE in the host's user namespace, which the worker may
    lack, e.g. in a container)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError:
        pass


class CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class CapData(ctypes.Structure):
    _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32))


def drop_bounding_and_ambient() -> None:
    """Empty the bounding and ambient sets (dropping from the bounding set needs CAP_SETPCAP: before the uid
    change, or right after entering a user namespace)."""
    last_cap = int(read_text("/proc/sys/kernel/cap_last_cap"))
    for cap in range(last_cap + 1):
        prctl(PR_CAPBSET_DROP, cap)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)


def clear_capability_sets(where: str) -> None:
    """Empty the effective, permitted and inheritable sets with capset(2), then verify all five sets are empty.
    Needed beside the uid change: leaving uid 0 clears permitted and effective only, never inheritable (bwrap's
    ``--cap-add`` fills it)."""
    header, data = CapHeader(LINUX_CAPABILITY_VERSION_3, 0), (CapData * 2)()
    ok(libc.capset(ctypes.byref(header), data), "capset")
    status = read_text("/proc/self/status")
    for key in ("CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"):
        value = status.split(key, 1)[1].split(None, 1)[0]
        if int(value, 16) != 0:
            raise OSError("capabilities left " + where + ": " + key + value)


def drop_caps_and_ids(uid: int, gid: int, groups: list[int]) -> None:
    """Every capability (bounding and ambient sets too) dropped, then ``uid``/``gid``/``groups`` taken
    (real, effective and saved); verified. No-new-privs is the caller's next step."""
    drop_bounding_and_ambient()
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    clear_capability_sets("after the drop")
    if (
        os.getresuid() != (uid, uid, uid)
        or os.getresgid() != (gid, gid, gid)
        or sorted(os.getgroups()) != sorted(groups)
    ):
        raise OSError("uid/gid drop failed")


def load_seccomp(filter_bytes: bytes) -> None:
    buf = ctypes.create_string_buffer(filter_bytes, len(filter_bytes))
    prog = SockFprog(len(filter_bytes) // 8, ctypes.cast(buf, ctypes.c_void_p))
    ok(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def status_code(status: int) -> int:
    """A wait status as bwrap and runc report it: the exit code, or 128 + signal."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) & 0xFF


def _default_signals() -> None:
    for sig in range(1, signal.NSIG):
        try:  # noqa: SIM105
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass


def run_program(spec: dict[str, Any], *, default_signals: bool) -> int:
    """Last step of H (already sandboxed): the grader's harness in-process, anything else exec'd (with every
    signal disposition reset to the default first if ``default_signals``, as under runc)."""
    argv = list(spec["argv"])
    env = dict(spec["env"])
    os.environ.clear()
    os.environ.update(env)
    del spec
    n = len(FAST_FLAGS)
    fast = argv[0] in ("python3", "/usr/bin/python3") and tuple(argv[1 : 1 + n]) == FAST_FLAGS
    if not (fast and len(argv) > n + 2 and argv[1 + n] == "-c"):
        if default_signals:
            _default_signals()
        try:
            os.execvpe(argv[0], argv, env)  # noqa: S606 - the sandboxed program, after every drop
        except OSError as exc:
            os.write(2, f"exec {argv[0]}: {exc.strerror}\n".encode())
            return 127
    source = argv[2 + n]
    sys.argv = ["-c", *argv[3 + n :]]
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    return main_status(lambda: exec(compile(source, "<string>", "exec", dont_inherit=True), main.__dict__))  # noqa: S102


def report(fd: int, what: str, exc: BaseException) -> None:
    try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
        os.write(fd, f"{what}: {type(exc).__name__}: {exc}\n".encode())
    except OSError:
        pass


def exit_with(report_fd: int, body: Callable[[], int]) -> NoReturn:
    """In a forked child: exit with ``body()``'s code; if it raises, say why on ``report_fd`` and exit
    ``SETUP_FAILED``. Never returns into the parent's code."""
    code = SETUP_FAILED
    try:
        code = body()
    except BaseException as exc:
        report(report_fd, "sandbox setup failed", exc)
    finally:
        os._exit(code)


def _supervise_request(sock: socket.socket, supervise: Callable[[list[int]], int], fds: list[int]) -> int:
    sock.close()
    return supervise(fds)


def serve_requests(
    ctl_fd: int, max_fds: int, accept: Callable[[int], bool], supervise: Callable[[list[int]], int]
) -> int:
    """The server loop: one forked ``supervise(fds)`` per ``run`` request whose fd count ``accept`` takes.
    Requests are fds only, never run data. Ends at the worker's EOF."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    gc.collect()
    gc.freeze()  # a collection in a forked run must not touch (and so copy) every page of the server
    sock = socket.socket(fileno=ctl_fd)
    sock.sendall(b"ready")
    fd_size = array.array("i").itemsize
    while True:
        try:
            msg, ancdata, _, _ = sock.recvmsg(16, socket.CMSG_SPACE(max_fds * fd_size))
        except InterruptedError:
            continue
        if not msg:
            return 0
        received = array.array("i")
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received.frombytes(data[: len(data) - (len(data) % fd_size)])
        fds = list(received)
        if msg == b"run" and accept(len(fds)):
            try:
                pid = os.fork()
            except OSError:
                pid = -1
            if pid == 0:  # a failure in the child must never return into this loop
                exit_with(fds[3], functools.partial(_supervise_request, sock, supervise, fds))
        for fd in fds:
            os.close(fd)
