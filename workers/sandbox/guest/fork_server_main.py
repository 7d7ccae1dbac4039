"""The fork server's program: runs INSIDE the sandbox rootfs on the image's own python3, never in the worker.

Why a fork server: exec'ing ``sh -> setpriv -> bwrap -> sh -> python3`` costs ~18 ms of CPU per run; forking
this already-started interpreter costs ~1 ms. Every run still gets a pristine sandbox of its own:

* The server ("Z") runs as root with all capabilities in a bwrap mount/pid/net/ipc/uts namespace whose root is
  the read-only rootfs. It never reads run data: a request carries only file descriptors (spec, stdin,
  stdout, stderr, status, the run cgroup's ``cgroup.procs``), so its memory is the same for every run.
* Per request Z forks a supervisor ("C", root) that first joins the run cgroup (from then on the worker
  accounts and kills the whole tree), then unshares mount/pid/net/ipc/uts/cgroup namespaces, mounts ONE
  fresh tmpfs with the run's size and inode caps (bound on /work, /tmp, /dev/shm, /mnt) and a new devpts, and
  forks the pid-1 reaper ("G", mounts a fresh /proc) which forks the program ("H").
* H drops every capability (bounding and ambient sets too), becomes the unprivileged sandbox uid with no
  supplementary groups, sets no-new-privs and rlimits, enters a user namespace of its own that maps only that
  uid and gid (host root is unmapped inside; the new namespace's capabilities are emptied at once), loads the
  same seccomp filter as bwrap (which denies creating further namespaces), gets a clean
  environment and only fds 0-2, prints the start marker and then runs the program. The grader's harness
  (the one loader, ``python3 -I -S -B -c LOADER``, the server's own flags) runs in-process; anything else is exec'd.
* G exits when H does (pid 1 gone: the kernel kills the rest of the namespace); C reports H's status like
  bwrap (128 + signal) on the status pipe. The worker kills the cgroup at the end however the run ended.

Standard library only, with ``boot_common`` (what both in-sandbox servers share) spliced in; started by the one
loader (``workers.sandbox.guest_program``) with ``CTL_FD UID FILTER_LEN TAG``, the seccomp filter on stdin after
the program.
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import signal
import sys

from workers.sandbox.guest.boot_common import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    PR_SET_NO_NEW_PRIVS,
    SETUP_FAILED,
    child_netns_own_tcp_hash,
    clear_capability_sets,
    drop_bounding_and_ambient,
    drop_caps_and_ids,
    exit_with,
    libc,
    limit_run_netns,
    load_seccomp,
    loopback_up,
    ok,
    open_private_proc_sys,
    parse_spec,
    prctl,
    program_fds,
    run_program,
    serve_requests,
    set_oom_score_adj,
    status_code,
    stdin_from_devnull,
    with_private_proc,
)
from workers.sandbox.guest.plumbing import PR_SET_DUMPABLE, PR_SET_PDEATHSIG, read_all, write_all

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWPID = 0x20000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
N_FIXED_FDS = 5  # spec, stdin, stdout, stderr, status; then one cgroup.procs per hierarchy
#: Where the run's tmpfs is mounted while it is filled (an empty dir of every rootfs; /mnt is the run's own).
STAGE = "/srv"


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    ok(
        libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def _populate(stage: str, spec: dict[str, Any], uid: int) -> None:
    """One capped tmpfs holding work/tmp/shm/mnt, files written as root and chowned (O_EXCL|O_NOFOLLOW).
    /mnt is the run's too: SandboxFusion's clients write and fetch files at absolute paths there."""
    opts = f"size={int(spec['size_mb'])}m,nr_inodes={int(spec['inodes'])},mode=0711,uid=0,gid=0"
    _mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, opts)
    for sub, mode in (("work", 0o755), ("tmp", 0o1777), ("shm", 0o1777), ("mnt", 0o755)):
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
            write_all(fd, data)
            os.fchown(fd, uid, uid)
        finally:
            os.close(fd)
    for sub, target in (("work", "/work"), ("tmp", "/tmp"), ("shm", "/dev/shm"), ("mnt", "/mnt")):  # noqa: S108
        if sub != "mnt" or os.path.isdir(target):
            _mount(stage + "/" + sub, target, None, MS_BIND, None)
    ok(libc.umount2(stage.encode(), MNT_DETACH), f"umount {stage}")
    if os.path.isdir("/dev/pts"):
        _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")


def _drop_privileges(uid: int) -> None:
    """Root with all caps -> the sandbox uid with no caps at all, no-new-privs, rlimits."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    drop_caps_and_ids(uid, uid, [])
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def _write_proc_self(name: str, text: str) -> None:
    fd = os.open("/proc/self/" + name, os.O_WRONLY)
    try:
        write_all(fd, text.encode())
    finally:
        os.close(fd)


def _enter_user_namespace(uid: int) -> None:
    """H's own user namespace, entered unprivileged (as ``uid``, after the drop): only ``uid``/its group map
    onto themselves, every other host id (root included) is unmapped inside, setgroups is denied. A new user
    namespace grants a full capability set over what it owns (nothing: every other namespace of the run
    belongs to the host's); it is emptied at once, bounding set included, and verified."""
    prctl(PR_SET_DUMPABLE, 1)  # /proc/self/*_map belong to root while non-dumpable (after the uid change)
    ok(libc.unshare(CLONE_NEWUSER), "unshare user")
    _write_proc_self("setgroups", "deny")
    _write_proc_self("uid_map", f"{uid} {uid} 1")
    _write_proc_self("gid_map", f"{uid} {uid} 1")
    prctl(PR_SET_DUMPABLE, 0)
    drop_bounding_and_ambient()
    clear_capability_sets("in the run's user namespace")
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid):
        raise OSError("ids changed entering the run's user namespace")


def _program(spec: dict[str, Any], fds: list[int], uid: int, seccomp_filter: bytes, marker: bytes) -> int:
    """H: pid 2 of the run's pid namespace. Once its fds are 0-2 only, a setup failure is reported on its
    stderr (the one it was handed is closed by then)."""
    program_fds(fds)
    exit_with(2, functools.partial(_isolate_and_run, spec, uid, seccomp_filter, marker))


def _isolate_and_run(spec: dict[str, Any], uid: int, seccomp_filter: bytes, marker: bytes) -> int:
    os.chdir("/work")
    set_oom_score_adj(0)
    _drop_privileges(uid)
    _enter_user_namespace(uid)
    load_seccomp(seccomp_filter)
    write_all(1, marker)
    return run_program(spec, default_signals=False)


def _init(spec: dict[str, Any], fds: list[int], uid: int, seccomp_filter: bytes, marker: bytes) -> int:
    """G: pid 1 of the run's pid namespace; reaps orphans and exits with H's status."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    pid = os.fork()
    if pid == 0:
        exit_with(fds[3], functools.partial(_program, spec, fds, uid, seccomp_filter, marker))
    for fd in fds:
        os.close(fd)
    set_oom_score_adj(0)
    _drop_privileges(uid)  # pid 1 only waits: it needs no privilege either
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)  # pid 1 ignores default-action signals sent from inside
    prctl(PR_SET_DUMPABLE, 0)
    del spec
    while True:
        try:
            child, status = os.wait()
        except ChildProcessError:
            return SETUP_FAILED
        except InterruptedError:
            continue
        if child == pid:
            return status_code(status)


def _supervise(fds: list[int], uid: int, seccomp_filter: bytes, netns: tuple[int, str]) -> int:
    """C: joins the run cgroup, builds the namespaces and mounts, reports the program's status. ``netns``: Z's
    ``/proc/sys`` dirfd and Z's own network namespace (``limit_run_netns``)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    spec_fd, status_fd, procs = fds[0], fds[4], fds[N_FIXED_FDS:]
    for fd in procs:  # first: from now on the worker measures and kills everything this run starts
        os.write(fd, b"0")
        os.close(fd)
    set_oom_score_adj(-1000)  # an OOM kill in the run cgroup must hit the program, not its supervisors
    blob = read_all(spec_fd)
    spec = parse_spec(blob)
    del blob
    marker = spec["marker"].encode()
    ok(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    ok(libc.sethostname(b"sandbox", 7), "sethostname")
    loopback_up()
    limit_run_netns(*netns)
    os.close(netns[0])
    _populate(STAGE, spec, uid)
    ok(libc.unshare(CLONE_NEWCGROUP), "unshare cgroup")
    pid = os.fork()
    if pid == 0:
        exit_with(fds[3], functools.partial(_init, spec, fds[:N_FIXED_FDS], uid, seccomp_filter, marker))
    for fd in fds[:4]:
        os.close(fd)
    del spec
    status = os.waitpid(pid, 0)[1]  # PEP 475: retried on EINTR
    write_all(status_fd, status_code(status).to_bytes(4, "big"))
    return 0


def serve(ctl_fd: int, uid: int, seccomp_filter: bytes) -> int:
    """Z: fork one supervisor per request; requests are fds only, never run data."""
    netns = (open_private_proc_sys(), os.readlink("/proc/self/ns/net"))
    return serve_requests(
        ctl_fd, 32, lambda n: n > N_FIXED_FDS, lambda fds: _supervise(fds, uid, seccomp_filter, netns)
    )


def _main() -> int:
    ctl_fd, uid, filter_len = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    seccomp_filter = os.read(0, filter_len)
    if len(seccomp_filter) != filter_len:
        return SETUP_FAILED
    stdin_from_devnull()
    with_private_proc(2, child_netns_own_tcp_hash)
    return serve(ctl_fd, uid, seccomp_filter)


if __name__ == "__main__":
    os._exit(_main())
