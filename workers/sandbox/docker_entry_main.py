"""The docker warm pool's entry server: the image's own python3, run in a pooled container's namespaces.

Why: a ``docker exec`` costs dockerd + containerd + a ``runc exec`` (a Go binary that enters the container)
per run, ~60 ms of latency and most of a warm run's CPU. ``runc exec`` only enters the container's
namespaces and cgroups and drops privileges; this server does the same entry once per container and then
forks per run (~1 ms). Every run still gets exactly what a ``docker exec`` gets, verified per run:

* The server ("E") is started by the worker through ``nsenter --no-fork`` into the container's mount, uts,
  ipc, net, cgroup namespaces with the container's pid namespace for its CHILDREN only: E itself stays in
  the host pid namespace (no process of the container can see or signal it) and outside the container's
  cgroups. E is root with capabilities; it never reads run data: a request carries only fds (spec, stdin,
  stdout, stderr, status), so its memory is the same for every run.
* Per run E forks a supervisor ("C", root, pid namespace = the container's) that joins every cgroup of the
  container first (from then on docker's memory/cpu/pids limits apply and the worker accounts the run),
  verifies that its namespaces and cgroups are exactly those of the container's init, becomes a child
  subreaper, and forks the program ("H").
* H drops every capability (bounding and ambient too), takes the container init's uid, gid and groups
  (never root) and its rlimits, sets no-new-privs, loads the same seccomp policy the
  container was created with (``docker_profile`` == ``build_filter``), checks that its uid/gid/groups,
  capability sets, no-new-privs and seccomp mode equal the init's, writes the run's files into the empty
  ``/work``, prints the start marker and runs the program: the grader's harness (``python3 -I -S -B -c``,
  E's own flags) in-process, anything else exec'd.
* C waits for H, then SIGKILLs every other process of the container's pid namespace (``kill(-1)``: all but
  the init and C itself), reaps them all (orphans come to C, the subreaper) and only then writes H's status
  (128 + signal for a signal death) on the status pipe, which only C holds: a candidate can end its own
  program with any exit code, but cannot forge the status or outlive the run.
The worker resets the container from the host afterwards (kill, wipe the writable mounts, check IPC) as
after a ``docker exec``.

Standard library only; started as ``python3 -I -S -B -c BOOT LEN CTL_FD TAG PROCS_FD...`` with this source
(LEN bytes), a JSON config line and the seccomp filter on stdin (the source is not in the command line that
every process of the container can read).
"""

from __future__ import annotations

import array
import builtins
import collections
import ctypes
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
import sys
import time
import traceback
import types

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

_PRELOADED = (builtins, collections, functools, io, json, marshal, math, select, time, traceback, types)

PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
SETUP_FAILED = 125
N_FDS = 5  # spec, stdin, stdout, stderr, status
FAST_FLAGS = ("-I", "-S", "-B")
NAMESPACES = ("mnt", "uts", "ipc", "net", "pid", "cgroup", "user")
SAME_AS_INIT = (
    "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp",
)  # fmt: skip

libc = ctypes.CDLL(None, use_errno=True)


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _ok(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, what + ": " + os.strerror(err))


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


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def _parse_spec(blob: bytes) -> dict[str, Any]:
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


def _set_oom_score_adj(value: int) -> None:
    """Best effort (lowering it needs CAP_SYS_RESOURCE, which the worker may lack)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError:
        pass


def _status_lines(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition("\t")
        if key.rstrip(":") in SAME_AS_INIT:
            out[key.rstrip(":")] = " ".join(value.split())
    return out


def _lsm_label(pid: str) -> str:
    try:
        return _read_text("/proc/" + pid + "/attr/current").strip("\0\n ")
    except OSError:
        return "-"


def _verify_entered() -> None:
    """C: same namespaces, cgroups and LSM label as the container's init (pid 1), or no run at all."""
    for ns in NAMESPACES:
        mine, theirs = os.readlink("/proc/self/ns/" + ns), os.readlink("/proc/1/ns/" + ns)
        if mine != theirs:
            raise OSError("namespace " + ns + " differs from the container's: " + mine + " != " + theirs)
    if _read_text("/proc/self/cgroup") != _read_text("/proc/1/cgroup"):
        raise OSError("cgroups differ from the container's")
    if _lsm_label("self") != _lsm_label("1"):
        raise OSError("LSM label differs from the container's")


def _drop_privileges(config: dict[str, Any]) -> None:
    """Root with all caps -> the container user with no caps at all, no-new-privs, the init's rlimits."""
    uid, gid, groups = int(config["uid"]), int(config["gid"]), [int(g) for g in config["groups"]]
    if 0 in (uid, gid) or 0 in groups:
        raise OSError("refusing to run as root")
    inf = resource.RLIM_INFINITY
    for res, want_soft, want_hard in config["rlimits"]:
        # The init's limits; one above this server's own hard limit (raising needs CAP_SYS_RESOURCE, which
        # the worker may lack) is clamped to it: never looser than a docker exec'd process, maybe stricter.
        cur_hard = resource.getrlimit(res)[1]
        hard = cur_hard if cur_hard != inf and (want_hard == inf or want_hard > cur_hard) else want_hard
        soft = hard if hard != inf and (want_soft == inf or want_soft > hard) else want_soft
        resource.setrlimit(res, (soft, hard))
    last_cap = int(_read_text("/proc/sys/kernel/cap_last_cap"))
    for cap in range(last_cap + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    status = _read_text("/proc/self/status")
    for key in ("CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"):
        value = status.split(key, 1)[1].split(None, 1)[0]
        if int(value, 16) != 0:
            raise OSError("capabilities left after the drop: " + key + value)
    if (
        os.getresuid() != (uid, uid, uid)
        or os.getresgid() != (gid, gid, gid)
        or sorted(os.getgroups()) != sorted(groups)
    ):
        raise OSError("uid/gid drop failed")
    if 0 in (uid, gid) or 0 in groups:
        raise OSError("refusing to run as root")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def _load_seccomp(filter_bytes: bytes) -> None:
    buf = ctypes.create_string_buffer(filter_bytes, len(filter_bytes))
    prog = _SockFprog(len(filter_bytes) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _ok(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def _verify_like_init() -> None:
    """H, fully dropped: identity, capabilities, no-new-privs and seccomp mode equal the init's."""
    mine, theirs = _status_lines(_read_text("/proc/self/status")), _status_lines(_read_text("/proc/1/status"))
    if mine != theirs or len(mine) != len(SAME_AS_INIT):
        diff = sorted(k for k in SAME_AS_INIT if mine.get(k) != theirs.get(k))
        raise OSError("process differs from the container's init in " + ",".join(diff))


def _write_files(files: list[tuple[list[str], bytes]]) -> None:
    """As the container user, into the (verified empty) /work: O_EXCL|O_NOFOLLOW, directories created."""
    for parts, data in files:
        parent = "/work"
        for part in parts[:-1]:
            parent = parent + "/" + part
            if not os.path.isdir(parent):
                os.mkdir(parent, 0o755)
        fd = os.open(parent + "/" + parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)


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
        for sig in range(1, signal.NSIG):  # an exec'd program starts with default dispositions, as under runc
            try:  # noqa: SIM105
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
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


def _program(spec: dict[str, Any], fds: list[int], config: dict[str, Any], seccomp_filter: bytes) -> int:
    """H: the run's program, entered like ``docker exec --user UID:UID --workdir /work`` would start it."""
    os.setsid()
    for target, fd in enumerate(fds[1:4]):
        os.dup2(fd, target)
    os.closerange(3, 1 << 16)
    os.umask(0o022)
    os.chdir("/work")
    _set_oom_score_adj(int(config["oom_score_adj"]))
    _drop_privileges(config)
    if os.listdir("/work"):
        raise OSError("/work is not empty")
    _write_files(spec.pop("files"))
    _load_seccomp(seccomp_filter)
    _verify_like_init()
    _write_all(1, spec["marker"].encode())
    return _run_program(spec)


def _report(fd: int, what: str, exc: BaseException) -> None:
    try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
        os.write(fd, f"{what}: {type(exc).__name__}: {exc}\n".encode())
    except OSError:
        pass


def _child(spec: dict[str, Any], fds: list[int], config: dict[str, Any], seccomp_filter: bytes) -> None:
    code = SETUP_FAILED
    try:
        code = _program(spec, fds, config, seccomp_filter)
    except BaseException as exc:
        _report(2, "sandbox setup failed", exc)
    finally:
        os._exit(code)


def _supervise(fds: list[int], procs: list[int], config: dict[str, Any], seccomp_filter: bytes) -> int:
    """C: joins the container's cgroups, verifies the entry, runs H, kills and reaps the rest, reports."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in procs:  # first: from now on docker's limits apply and the worker accounts everything
        os.write(fd, b"0")
        os.close(fd)
    _set_oom_score_adj(-1000)  # an OOM kill in the container must hit the program, not its supervisor
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _verify_entered()
    spec_fd, status_fd = fds[0], fds[4]
    spec = _parse_spec(_read_all(spec_fd))
    os.close(spec_fd)
    pid = os.fork()
    if pid == 0:
        os.close(status_fd)
        _child(spec, fds, config, seccomp_filter)
    for fd in fds[1:4]:
        os.close(fd)
    del spec
    code = SETUP_FAILED
    while True:
        try:
            child, status = os.wait()
        except InterruptedError:
            continue
        except ChildProcessError:
            break
        if child == pid:
            code = _status_code(status)
            break
    # The program is done: nothing it started may outlive it (every process but the init and C itself).
    try:  # noqa: SIM105
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
    while True:
        try:
            os.wait()
        except InterruptedError:
            continue
        except ChildProcessError:
            break
    _write_all(status_fd, code.to_bytes(4, "big"))
    return 0


def serve(ctl_fd: int, procs: list[int], config: dict[str, Any], seccomp_filter: bytes) -> int:
    """E: fork one supervisor per request; requests are fds only, never run data. Ends at the worker's EOF."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    gc.collect()
    gc.freeze()  # a collection in a forked run must not touch (and so copy) every page of the server
    sock = socket.socket(fileno=ctl_fd)
    sock.sendall(b"ready")
    fd_size = array.array("i").itemsize
    while True:
        try:
            msg, ancdata, _, _ = sock.recvmsg(16, socket.CMSG_SPACE(8 * fd_size))
        except InterruptedError:
            continue
        if not msg:
            return 0
        received = array.array("i")
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received.frombytes(data[: len(data) - (len(data) % fd_size)])
        fds = list(received)
        if msg == b"run" and len(fds) == N_FDS:
            try:
                pid = os.fork()
            except OSError:
                pid = -1
            if pid == 0:
                code = SETUP_FAILED
                try:
                    sock.close()
                    code = _supervise(fds, procs, config, seccomp_filter)
                except BaseException as exc:
                    _report(fds[3], "sandbox setup failed", exc)
                finally:
                    os._exit(code)
        for fd in fds:
            os.close(fd)


def _main() -> int:
    ctl_fd = int(sys.argv[2])
    procs = [int(x) for x in sys.argv[4:]]
    data: bytes = globals().get("INPUT", b"")
    nl = data.find(b"\n")
    if nl < 0:
        return SETUP_FAILED
    config: dict[str, Any] = json.loads(data[:nl])
    seccomp_filter = data[nl + 1 :]
    if len(seccomp_filter) != int(config["filter_len"]) or not seccomp_filter:
        return SETUP_FAILED
    del data
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.chdir("/")
    return serve(ctl_fd, procs, config, seccomp_filter)


if __name__ == "__main__":
    os._exit(_main())
