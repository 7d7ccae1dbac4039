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
  subreaper, checks that the init is exactly as E first saw it, enters a network and an IPC namespace of the
  run's own (``_own_network_and_ipc``: the container's would carry sockets, ports, TCP metrics and IPC
  objects from one run to the next), and forks the program ("H"). The init runs as
  the sandbox uid and outlives every run. It is not dumpable (``docker_config.INIT``), so a run can neither
  read nor write its memory or page-table state (``/proc/1/mem``, ``clear_refs``, ``pagemap``, ptrace) nor
  write its /proc files; but a run can still change its rlimits, nice, scheduling policy, affinity and I/O
  priority (they only need the same uid), which the next run could read. So a run in a container whose init
  changed, or is dumpable, is refused (a ``sandbox_error``: the container is replaced and the run retried)
  before any of its code exists.
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

Standard library only, with ``boot_common`` (what both servers share) spliced in; started by the one loader
(``workers.sandbox.guest_program``) with ``CTL_FD TAG PROCS_FD...``, its input on stdin after the program: a
JSON config line and the seccomp filter.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import signal
import sys
import time

from workers.sandbox.guest.boot_common import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    PR_SET_NO_NEW_PRIVS,
    SETUP_FAILED,
    child_netns_own_tcp_hash,
    drop_caps_and_ids,
    exit_with,
    libc,
    limit_run_netns,
    load_seccomp,
    loopback_up,
    ok,
    open_in_private_proc,
    open_private_proc_sys,
    parse_spec,
    prctl,
    program_fds,
    read_text,
    run_program,
    serve_requests,
    set_oom_score_adj,
    status_code,
    stdin_from_devnull,
    with_private_proc,
)
from workers.sandbox.guest.plumbing import PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE, read_all, write_all

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

MS_RDONLY = 0x1
N_FDS = 5  # spec, stdin, stdout, stderr, status
OOM_SCORE_RUN = 1000
NAMESPACES = ("mnt", "uts", "ipc", "net", "pid", "cgroup", "user")
SAME_AS_INIT = (
    "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp",
)  # fmt: skip


def _status_lines(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition("\t")
        if key.rstrip(":") in SAME_AS_INIT:
            out[key.rstrip(":")] = " ".join(value.split())
    return out


def _lsm_label(pid: str) -> str:
    try:
        return read_text("/proc/" + pid + "/attr/current").strip("\0\n ")
    except OSError:
        return "-"


def _verify_entered() -> None:
    """C: same namespaces, cgroups and LSM label as the container's init (pid 1), or no run at all."""
    for ns in NAMESPACES:
        mine, theirs = os.readlink("/proc/self/ns/" + ns), os.readlink("/proc/1/ns/" + ns)
        if mine != theirs:
            raise OSError("namespace " + ns + " differs from the container's: " + mine + " != " + theirs)
    if read_text("/proc/self/cgroup") != read_text("/proc/1/cgroup"):
        raise OSError("cgroups differ from the container's")
    if _lsm_label("self") != _lsm_label("1"):
        raise OSError("LSM label differs from the container's")


_VOLATILE_STATUS = ("Vm", "Rss", "Hugetlb", "voluntary_ctxt", "nonvoluntary_ctxt", "SigQ")
_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}
_UNSETTLED = "unsettled"


def _init_non_dumpable() -> bool:
    """The init is not dumpable: its /proc files (not its directory) are then owned by root, not by its uid
    (never root, see ``docker_entry._init_config``). Only the init itself could make itself dumpable again."""
    return os.stat("/proc/1/mem").st_uid == 0


def _init_mappings() -> tuple[str, int]:
    """Every mapping of the init (``maps``) and how much of it is anonymous (written) memory in all
    (``smaps_rollup``). Its contents are out of reach of the sandbox uid (not dumpable, checked too), so they
    are not read (~5 ms for a python3 init); this is a tripwire: a write into a clean page would make it
    anonymous, a new mapping would show. ~0.1 ms per run (the per-mapping ``smaps``, parsed in Python: ~0.9)."""
    anonymous = 0
    for line in read_text("/proc/1/smaps_rollup").splitlines():
        if line.startswith("Anonymous:"):
            anonymous = int(line.split()[1])
    return read_text("/proc/1/maps"), anonymous


def _init_state() -> tuple[object, ...]:
    """What a run could change of the container's idle init (pid 1: the sandbox uid's own process, alive across
    runs): its rlimits (``prlimit``), nice, scheduling, affinity, I/O priority (all allowed to the same uid,
    dumpable or not); and, out of a run's reach as long as the init is not dumpable (so that is checked
    first), its memory, ``oom_score_adj``, ``coredump_filter``, autogroup, and where it sleeps. Anything of it
    changed would carry one run's data to the next: a run sees only an init in this state."""
    non_dumpable = _init_non_dumpable()
    stat = read_text("/proc/1/stat")
    fields = stat[stat.rindex(")") + 2 :].split()
    status = [line for line in read_text("/proc/1/status").splitlines() if not line.startswith(_VOLATILE_STATUS)]
    ioprio_nr = _IOPRIO_GET.get(os.uname().machine)
    ioprio = libc.syscall(ioprio_nr, 1, 1) if ioprio_nr is not None else None  # IOPRIO_WHO_PROCESS, pid 1
    extra = [read_text("/proc/1/" + name) for name in ("oom_score_adj", "coredump_filter", "autogroup")
             if os.path.exists("/proc/1/" + name)]  # fmt: skip
    return (
        non_dumpable,
        read_text("/proc/1/syscall"),
        read_text("/proc/1/limits"),
        [fields[i] for i in (0, 15, 16, 17, 37, 38)],  # state, priority, nice, threads, rt_priority, policy
        status,
        sorted(os.sched_getaffinity(1)),
        ioprio,
        extra,
        _init_mappings(),
    )


def _settled_init_state(wait_s: float = 5.0) -> tuple[object, ...]:
    """E, at start (before any run): the init's state once it sleeps for good (not dumpable any more, two
    equal looks, blocked in a syscall), the reference every run's supervisor checks against."""
    end = time.monotonic() + wait_s
    last = _init_state()
    while time.monotonic() < end:
        time.sleep(0.02)
        now = _init_state()
        if now == last and now[0] is True and not str(now[1]).startswith("running"):
            return now
        last = now
    raise OSError("the container's init did not settle (or is dumpable)")


def _check_init(reference: tuple[object, ...]) -> None:
    """C, before anything of the run exists: the init is exactly as the entry server first saw it."""
    now = _init_state()
    if now != reference:
        names = ("dumpable", "syscall", "limits", "stat", "status", "affinity", "ioprio", "proc files", "memory")
        diff = [n for n, a, b in zip(names, now, reference, strict=True) if a != b]
        raise OSError("the container's init was changed (by an earlier run): " + ",".join(diff))


def _rewind_pids(ns_last_pid: int) -> None:
    """The container's next pid is 2 again, as in a fresh container: the pid numbers a run sees must not tell
    how many processes earlier runs started. ``ns_last_pid`` acts on the WRITER's pid namespace: only a process
    of the container's (C, or a child of E) may write it, never E itself (the host's)."""
    if os.readlink("/proc/self/ns/pid") != os.readlink("/proc/1/ns/pid"):
        raise OSError("not in the container's pid namespace")
    os.pwrite(ns_last_pid, b"1", 0)


def _rewound(ns_last_pid: int) -> int:
    _rewind_pids(ns_last_pid)
    return 0


def _hide_container_cgroups() -> None:
    """E, once per container before any run: an empty read-only tmpfs over /sys/fs/cgroup. The container's
    counters (pids.events, memory.failcnt and peaks, cpu usage and throttling) add up over every run of the
    container and cannot be reset: a run could write data into them for a later run to read. The worker
    accounts each run from the host."""
    if os.path.isdir("/sys/fs/cgroup"):
        flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
        ok(libc.mount(b"tmpfs", b"/sys/fs/cgroup", b"tmpfs", flags, b"size=4k,mode=0555"), "hide cgroups")


def _own_network_and_ipc(config: dict[str, Any]) -> None:
    """C, per run: a network namespace (only ``lo``, up, limited like the process backend's) and an IPC
    namespace of the run's own. Nothing a run leaves there (TIME_WAIT and orphaned sockets, ports, abstract
    unix sockets, TCP metrics, SysV objects, POSIX queues) outlives it, and nothing an earlier run left is
    there. Everything else stays the container's."""
    ok(libc.unshare(CLONE_NEWNET | CLONE_NEWIPC), "unshare net/ipc")
    loopback_up()
    limit_run_netns(int(config["proc_sys"]), str(config["server_netns"]))
    os.close(int(config["proc_sys"]))


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
    drop_caps_and_ids(uid, gid, groups)
    if 0 in (uid, gid) or 0 in groups:
        raise OSError("refusing to run as root")
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def _verify_like_init() -> None:
    """H, fully dropped: identity, capabilities, no-new-privs and seccomp mode equal the init's."""
    mine, theirs = _status_lines(read_text("/proc/self/status")), _status_lines(read_text("/proc/1/status"))
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
            write_all(fd, data)
        finally:
            os.close(fd)


def _program(spec: dict[str, Any], fds: list[int], config: dict[str, Any], seccomp_filter: bytes) -> int:
    """H: the run's program, entered like ``docker exec --user UID:UID --workdir /work`` would start it."""
    program_fds(fds)
    os.umask(0o022)
    os.chdir("/work")
    # The OOM killer's first choice in the container, whatever the init's score: the init's death would end
    # the container's pid namespace, and with it the supervisor (a run forcing a ``sandbox_error``).
    set_oom_score_adj(max(int(config["oom_score_adj"]), OOM_SCORE_RUN))
    _drop_privileges(config)
    if os.listdir("/work"):
        raise OSError("/work is not empty")
    _write_files(spec.pop("files"))
    load_seccomp(seccomp_filter)
    _verify_like_init()
    write_all(1, spec["marker"].encode())
    return run_program(spec, default_signals=True)


def _supervise(fds: list[int], procs: list[int], config: dict[str, Any], seccomp_filter: bytes) -> int:
    """C: joins the container's cgroups, verifies the entry, runs H, kills and reaps the rest, reports."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in procs:  # first: from now on docker's limits apply and the worker accounts everything
        os.write(fd, b"0")
        os.close(fd)
    set_oom_score_adj(-1000)  # an OOM kill in the container must hit the program, not its supervisor
    prctl(PR_SET_DUMPABLE, 0)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    _verify_entered()
    _check_init(config["init_state"])
    spec_fd, status_fd = fds[0], fds[4]
    spec = parse_spec(read_all(spec_fd))
    os.close(spec_fd)
    _own_network_and_ipc(config)
    pid = os.fork()
    if pid == 0:
        os.close(status_fd)
        exit_with(2, functools.partial(_program, spec, fds, config, seccomp_filter))
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
            code = status_code(status)
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
    _rewind_pids(int(config["ns_last_pid"]))  # on failure: no status, the container is not reused
    write_all(status_fd, code.to_bytes(4, "big"))
    return 0


def serve(ctl_fd: int, procs: list[int], config: dict[str, Any], seccomp_filter: bytes) -> int:
    """E: fork one supervisor per request; requests are fds only, never run data. Ends at the worker's EOF."""
    config = {**config, "init_state": _settled_init_state()}
    _hide_container_cgroups()
    with_private_proc(2, child_netns_own_tcp_hash)
    ns_last_pid = open_in_private_proc("/proc/sys/kernel/ns_last_pid")
    config["ns_last_pid"] = ns_last_pid
    config["proc_sys"] = open_private_proc_sys()
    config["server_netns"] = os.readlink("/proc/1/ns/net")  # the container's (E has no /proc/self here)
    pid = os.fork()  # a child in the container's pid namespace rewinds it before the first run
    if pid == 0:
        exit_with(2, functools.partial(_rewound, ns_last_pid))
    if os.waitpid(pid, 0)[1] != 0:
        raise OSError("cannot rewind the container's pids")
    return serve_requests(ctl_fd, 8, lambda n: n == N_FDS, lambda fds: _supervise(fds, procs, config, seccomp_filter))


def _main() -> int:
    ctl_fd = int(sys.argv[1])
    procs = [int(x) for x in sys.argv[3:]]
    data = read_all(0)
    nl = data.find(b"\n")
    if nl < 0:
        return SETUP_FAILED
    config: dict[str, Any] = json.loads(data[:nl])
    seccomp_filter = data[nl + 1 :]
    if len(seccomp_filter) != int(config["filter_len"]) or not seccomp_filter:
        return SETUP_FAILED
    del data
    stdin_from_devnull()
    os.chdir("/")
    return serve(ctl_fd, procs, config, seccomp_filter)


if __name__ == "__main__":
    os._exit(_main())
