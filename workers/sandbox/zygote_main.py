"""The fork server's program: runs INSIDE the sandbox rootfs on the image's own python3, never in the worker.

Why a fork server: exec'ing ``sh -> setpriv -> bwrap -> sh -> python3`` costs ~18 ms of CPU per run; forking
this already-started interpreter costs ~1 ms. Every run still gets a pristine sandbox of its own:

* The server ("Z") runs as root with all capabilities in a bwrap mount/pid/net/ipc/uts namespace whose root is
  the read-only rootfs. It never reads run data: a request carries only file descriptors (spec, stdin,
  stdout, stderr, status, the run cgroup's ``cgroup.procs``), so its memory is the same for every run.
* Per request Z forks a supervisor ("C", root) that first joins the run cgroup (from then on the worker
  accounts and kills the whole tree), then unshares mount/pid/net/ipc/uts/cgroup namespaces, mounts ONE
  fresh tmpfs with the run's size and inode caps (bound on /work, /tmp, /dev/shm) and a new devpts, and
  forks the pid-1 reaper ("G", mounts a fresh /proc) which forks the program ("H").
* H drops every capability (bounding and ambient sets too), becomes the unprivileged sandbox uid with no
  supplementary groups, sets no-new-privs and rlimits, loads the same seccomp filter as bwrap, gets a clean
  environment and only fds 0-2, prints the start marker and then runs the program. The grader's harness
  (``python3 -I -S -B -c BOOT``, the server's own flags) runs in-process; anything else is exec'd.
* G exits when H does (pid 1 gone: the kernel kills the rest of the namespace); C reports H's status like
  bwrap (128 + signal) on the status pipe. The worker kills the cgroup at the end however the run ended.

Standard library only; started as ``python3 -I -S -B -c SOURCE CTL_FD UID``.
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
import resource
import select
import signal
import socket
import struct
import sys
import time
import traceback
import types

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

_PRELOADED = (builtins, collections, functools, io, json, marshal, math, select, time, traceback, types)

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
SETUP_FAILED = 125
N_FIXED_FDS = 5  # spec, stdin, stdout, stderr, status; then one cgroup.procs per hierarchy
FAST_FLAGS = ("-I", "-S", "-B")
STAGE = "/mnt"

libc = ctypes.CDLL(None, use_errno=True)


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _ok(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, what + ": " + os.strerror(err))


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    _ok(
        libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def _prctl(option: int, arg: int) -> None:
    _ok(libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _parse_spec(blob: bytes) -> dict[str, Any]:
    """Header line (JSON) + the raw bytes of every file, in header order."""
    nl = blob.index(b"\n")
    spec: dict[str, Any] = json.loads(blob[:nl])
    pos = nl + 1
    files = []
    for name, size in spec["files"]:
        parts = name.split("/")
        if name.startswith("/") or not parts or ".." in parts or "" in parts:
            raise ValueError("bad file name " + repr(name))
        files.append((parts, blob[pos : pos + size]))
        pos += size
    spec["files"] = files
    return spec


def _populate(stage: str, spec: dict[str, Any], uid: int) -> None:
    """One capped tmpfs holding work/tmp/shm, files written as root and chowned (O_EXCL|O_NOFOLLOW)."""
    opts = f"size={int(spec['size_mb'])}m,nr_inodes={int(spec['inodes'])},mode=0711,uid=0,gid=0"
    _mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, opts)
    for sub, mode in (("work", 0o755), ("tmp", 0o1777), ("shm", 0o1777)):
        path = stage + "/" + sub
        os.mkdir(path)
        os.chown(path, uid, uid)
        os.chmod(path, mode)
    work = stage + "/work"
    for parts, data in spec["files"]:
        parent = work
        for part in parts[:-1]:
            parent = parent + "/" + part
            if not os.path.isdir(parent):
                os.mkdir(parent)
                os.chown(parent, uid, uid)
        fd = os.open(parent + "/" + parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            _write_all(fd, data)
            os.fchown(fd, uid, uid)
        finally:
            os.close(fd)
    for sub, target in (("work", "/work"), ("tmp", "/tmp"), ("shm", "/dev/shm")):  # noqa: S108
        _mount(stage + "/" + sub, target, None, MS_BIND, None)
    _ok(libc.umount2(stage.encode(), MNT_DETACH), f"umount {stage}")
    if os.path.isdir("/dev/pts"):
        _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")


def _loopback_up() -> None:
    """The new network namespace has only ``lo``, down; bring it up (as bwrap does) so local servers work."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))
        flags = struct.unpack("16sH22x", ifr)[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
    finally:
        sock.close()


def _set_oom_score_adj(value: int) -> None:
    """Best effort (lowering needs CAP_SYS_RESOURCE in the host's user namespace, which a container lacks)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError:
        pass


def _drop_privileges(uid: int) -> None:
    """Root with all caps -> the sandbox uid with no caps at all, no-new-privs, rlimits."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    for cap in range(last_cap + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    with open("/proc/self/status") as f:
        status = f.read()
    for key in ("CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"):
        value = status.split(key, 1)[1].split(None, 1)[0]
        if int(value, 16) != 0:
            raise OSError("capabilities left after the drop: " + key + value)
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != uid or os.getgroups():
        raise OSError("uid/gid drop failed")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def _load_seccomp(filter_bytes: bytes) -> None:
    buf = ctypes.create_string_buffer(filter_bytes, len(filter_bytes))
    prog = _SockFprog(len(filter_bytes) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _ok(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def _status_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) & 0xFF


def _run_program(spec: dict[str, Any]) -> int:
    """Last step of H (already sandboxed): the grader's harness in-process, anything else exec'd."""
    argv = list(spec["argv"])
    env = dict(spec["env"])
    os.environ.clear()
    os.environ.update(env)
    del spec
    n = len(FAST_FLAGS)
    fast = argv[0] in ("python3", "/usr/bin/python3") and tuple(argv[1 : 1 + n]) == FAST_FLAGS
    if not (fast and len(argv) > n + 2 and argv[1 + n] == "-c"):
        try:
            os.execvpe(argv[0], argv, env)  # noqa: S606 - the sandboxed program, after every drop
        except OSError as exc:
            os.write(2, f"exec {argv[0]}: {exc.strerror}\n".encode())
            return 127
    source = argv[2 + n]
    sys.argv = ["-c", *argv[3 + n :]]
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    status = 0
    try:
        exec(compile(source, "<string>", "exec", dont_inherit=True), main.__dict__)  # noqa: S102 - sandboxed
    except SystemExit as exc:
        status = 0 if exc.code is None else (exc.code & 0xFF if type(exc.code) is int else 1)
    except BaseException:
        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        status = status or 1
    return status


def _program(spec: dict[str, Any], fds: list[int], uid: int, seccomp_filter: bytes, marker: bytes) -> int:
    """H: pid 2 of the run's pid namespace."""
    os.setsid()
    for target, fd in enumerate(fds[1:4]):
        os.dup2(fd, target)
    os.closerange(3, 1 << 16)
    os.chdir("/work")
    _set_oom_score_adj(0)
    _drop_privileges(uid)
    _load_seccomp(seccomp_filter)
    _write_all(1, marker)
    return _run_program(spec)


def _init(spec: dict[str, Any], fds: list[int], uid: int, seccomp_filter: bytes, marker: bytes) -> int:
    """G: pid 1 of the run's pid namespace; reaps orphans and exits with H's status."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    pid = os.fork()
    if pid == 0:
        code = SETUP_FAILED
        try:
            code = _program(spec, fds, uid, seccomp_filter, marker)
        except BaseException as exc:
            _report(fds[3], "sandbox setup failed", exc)
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    _set_oom_score_adj(0)
    _drop_privileges(uid)  # pid 1 only waits: it needs no privilege either
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)  # pid 1 ignores default-action signals sent from inside
    _prctl(PR_SET_DUMPABLE, 0)
    del spec
    while True:
        try:
            child, status = os.wait()
        except ChildProcessError:
            return SETUP_FAILED
        except InterruptedError:
            continue
        if child == pid:
            return _status_code(status)


def _report(fd: int, what: str, exc: BaseException) -> None:
    try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
        os.write(fd, f"{what}: {type(exc).__name__}: {exc}\n".encode())
    except OSError:
        pass


def _supervise(fds: list[int], uid: int, seccomp_filter: bytes) -> int:
    """C: joins the run cgroup, builds the namespaces and mounts, reports the program's status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    spec_fd, status_fd, procs = fds[0], fds[4], fds[N_FIXED_FDS:]
    for fd in procs:  # first: from now on the worker measures and kills everything this run starts
        os.write(fd, b"0")
        os.close(fd)
    _set_oom_score_adj(-1000)  # an OOM kill in the run cgroup must hit the program, not its supervisors
    blob = _read_all(spec_fd)
    spec = _parse_spec(blob)
    del blob
    marker = spec["marker"].encode()
    _ok(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    _ok(libc.sethostname(b"sandbox", 7), "sethostname")
    _loopback_up()
    _populate(STAGE, spec, uid)
    _ok(libc.unshare(CLONE_NEWCGROUP), "unshare cgroup")
    pid = os.fork()
    if pid == 0:
        code = SETUP_FAILED
        try:
            code = _init(spec, fds[:N_FIXED_FDS], uid, seccomp_filter, marker)
        except BaseException as exc:
            _report(fds[3], "sandbox setup failed", exc)
        finally:
            os._exit(code)
    for fd in fds[:4]:
        os.close(fd)
    del spec
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    _write_all(status_fd, _status_code(status).to_bytes(4, "big"))
    return 0


def serve(ctl_fd: int, uid: int, seccomp_filter: bytes) -> int:
    """Z: fork one supervisor per request; requests are fds only, never run data."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    gc.collect()
    gc.freeze()  # a collection in a forked run must not touch (and so copy) every page of the server
    sock = socket.socket(fileno=ctl_fd)
    sock.sendall(b"ready")
    fd_size = array.array("i").itemsize
    while True:
        try:
            msg, ancdata, _, _ = sock.recvmsg(16, socket.CMSG_SPACE(32 * fd_size))
        except InterruptedError:
            continue
        if not msg:
            return 0
        received = array.array("i")
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received.frombytes(data[: len(data) - (len(data) % fd_size)])
        fds = list(received)
        if msg == b"run" and len(fds) > N_FIXED_FDS:
            try:
                pid = os.fork()
            except OSError:
                pid = -1
            if pid == 0:
                code = SETUP_FAILED
                try:
                    sock.close()
                    code = _supervise(fds, uid, seccomp_filter)
                except BaseException as exc:
                    _report(fds[3], "sandbox setup failed", exc)
                finally:
                    os._exit(code)
        for fd in fds:
            os.close(fd)


def _main() -> int:
    ctl_fd, uid, filter_len = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    seccomp_filter = os.read(0, filter_len)
    if len(seccomp_filter) != filter_len:
        return SETUP_FAILED
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return serve(ctl_fd, uid, seccomp_filter)


if __name__ == "__main__":
    os._exit(_main())
