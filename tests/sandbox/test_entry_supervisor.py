"""Hostile tests of the docker entry path's trust boundary: the root supervisor in the container's pid namespace
and the container's idle init, which outlives every run of a pooled container.

The candidate (the sandbox uid, no capabilities, no-new-privs, seccomp) tries to signal, trace, read and
write the supervisor, to confuse its wait with ``clone`` tricks, to race its final kill, and to leave state in
the init (same uid but not dumpable: its memory and page-table state must be out of reach; its rlimits,
scheduling... are not, and must not reach the next run either) for the next run. Every attack must fail,
the run's result must stay what the program really did, and the next run in the same pool must be pristine.
Hostile programs run only inside the docker sandbox under test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from schemas.settings import Settings
from tests.sandbox.test_docker_pool import _run, _wait_pooled
from workers.sandbox.api import Sandbox
from workers.sandbox.api import SandboxStatus as S
from workers.sandbox.factory import make_sandbox

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def pool(docker_sandbox: Sandbox, sandbox_settings: Settings) -> Iterator[Any]:
    """A docker backend with ONE warm container whose runs go through its entry server."""
    sb: Any = make_sandbox(sandbox_settings.model_copy(update={"sandbox_pool_size": 1}), "docker")
    try:
        if sb.pool._nsenter is None:
            pytest.skip("the docker entry server needs root and nsenter (Debian util-linux)")
        yield sb
        assert sb.audit(wait_s=10.0) == []
    finally:
        sb.close()


#: What the next run can see of the init and of the container's processes.
LOOK = r"""
import json, os, resource
def anon_memory():
    out, header = [], ''
    try:
        fd = os.open('/proc/1/mem', os.O_RDONLY)
    except PermissionError:
        return 'unreadable'
    for line in open('/proc/1/smaps'):
        if not line.split(' ', 1)[0].endswith(':'):
            header = line
        elif line.startswith('Anonymous:') and int(line.split()[1]):
            lo, hi = (int(x, 16) for x in header.split()[0].split('-'))
            out.append(os.pread(fd, hi - lo, lo).count(b'RS-SECRET-'))
    return sum(out)
procs = []
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) != os.getpid():
        uid = [l.split()[1] for l in open(f'/proc/{p}/status') if l.startswith('Uid:')][0]
        procs.append(uid)
print(json.dumps({
    'limits': [resource.prlimit(1, r) for r in (resource.RLIMIT_NOFILE, resource.RLIMIT_CPU, resource.RLIMIT_AS)],
    'nice': os.getpriority(os.PRIO_PROCESS, 1), 'policy': os.sched_getscheduler(1),
    'affinity': sorted(os.sched_getaffinity(1)),
    'files': [open(f'/proc/1/{f}').read() for f in ('oom_score_adj', 'coredump_filter')],
    'memory': anon_memory(), 'procs': sorted(procs),
}))
"""

TAMPER = r"""
import ctypes, json, os, resource
done = []
def attempt(name, fn):
    try:
        fn()
        done.append(name)
    except OSError:
        pass
def write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
def mem():
    fd = os.open('/proc/1/mem', os.O_RDWR)
    try:
        for line in open('/proc/1/maps'):
            lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
            if '[stack]' in line or (line.split()[1].startswith('rw') and 'vvar' not in line):
                os.pwrite(fd, b'RS-SECRET-FROM-THE-LAST-RUN', lo + 64)
    finally:
        os.close(fd)
def code():  # where the init returns to from its sleep: what it would run next
    ip = int(open('/proc/1/syscall').read().split()[-1], 16)
    fd = os.open('/proc/1/mem', os.O_RDWR)
    try:
        os.pwrite(fd, b'\xcc' * 16, ip)
    finally:
        os.close(fd)
def ioprio():
    nr = {'x86_64': 251, 'aarch64': 30}[os.uname().machine]
    if ctypes.CDLL(None, use_errno=True).syscall(nr, 1, 1, (2 << 13) | 7) != 0:  # IOPRIO_CLASS_BE, level 7
        raise OSError('ioprio_set')
attacks = {
    'mem': mem,
    'code': code,
    'prlimit': lambda: [resource.prlimit(1, r, (n, resource.prlimit(1, r)[1]))
                        for r, n in ((resource.RLIMIT_NOFILE, 123), (resource.RLIMIT_CPU, 77))],
    'nice': lambda: os.setpriority(os.PRIO_PROCESS, 1, 13),
    'policy': lambda: os.sched_setscheduler(1, os.SCHED_BATCH, os.sched_param(0)),
    'affinity': lambda: os.sched_setaffinity(1, {min(os.sched_getaffinity(1))}),
    'oom_score_adj': lambda: write('/proc/1/oom_score_adj', b'777'),
    'coredump_filter': lambda: write('/proc/1/coredump_filter', b'0x1ff'),
    'ioprio': ioprio,
}
attempt(WHAT, attacks[WHAT])
print(json.dumps(done), flush=True)
"""

TAMPERS = ("mem", "code", "prlimit", "nice", "policy", "affinity", "oom_score_adj", "coredump_filter", "ioprio")
#: Refused at the source: the init is not dumpable, so these need privileges a run does not have.
BLOCKED = ("mem", "code", "oom_score_adj", "coredump_filter")


@pytest.mark.parametrize("what", TAMPERS)
def test_what_a_run_does_to_the_init_never_reaches_the_next_run(pool: Any, what: str) -> None:
    """The init is the sandbox uid's own process and lives across runs: a run can write its memory (even its
    code, which it would run after its sleep) and change its rlimits, scheduling and /proc files. The host-side
    reset compares the init with how it was when the container joined the pool and discards a changed one, so
    the next run lands in a fresh container and nothing reaches a program: no run ever sees a ``sandbox_error``
    for what another did (the entry supervisor's own check stays, as defence in depth)."""
    before = _run(pool, LOOK)
    assert before.status is S.OK, before
    pristine = json.loads(before.stdout)
    assert pristine["memory"] == "unreadable"  # not dumpable
    (cid,) = _wait_pooled(pool)

    tamper = _run(pool, TAMPER.replace("WHAT", repr(what)))
    assert (tamper.status, tamper.exit_code) == (S.OK, 0), tamper  # the tampering run's own result is truthful
    changed = json.loads(tamper.stdout) == [what]
    if what in BLOCKED:
        assert not changed, f"{what} of the init worked"
    if changed:
        assert _wait_pooled(pool) != {cid}, "the tampered container went back to the pool"
    else:
        assert _wait_pooled(pool) == {cid}  # reset from the host and back in the pool, like after any clean run

    after = _run(pool, LOOK)
    assert after.status is S.OK, after
    assert json.loads(after.stdout) == pristine


#: More of what the same uid may change of the init, beyond ``TAMPERS``: through its process group and its
#: uid (``setpriority`` with ``PRIO_PGRP``/``PRIO_USER``), the idle policy, other rlimits, utilisation clamps,
#: timer slack. Prints whether it took.
MORE_TAMPER = r"""
import ctypes, json, os, resource, struct
libc = ctypes.CDLL(None, use_errno=True)
def uclamp():
    # struct sched_attr (VER1): size, policy, flags, nice, priority, runtime, deadline, period, util_min/max
    flags = 0x08 | 0x10 | 0x40  # SCHED_FLAG_KEEP_POLICY | KEEP_PARAMS | UTIL_CLAMP_MAX
    attr = struct.pack('<IIQiIQQQII', 56, 0, flags, 0, 0, 0, 0, 0, 0, 300)
    nr = {'x86_64': 314, 'aarch64': 274}[os.uname().machine]
    if libc.syscall(nr, 1, attr, 0) != 0:
        raise OSError(ctypes.get_errno(), 'sched_setattr')
def lower(res, soft):
    resource.prlimit(1, res, (soft, resource.prlimit(1, res)[1]))
def slack():
    with open('/proc/1/timerslack_ns', 'w') as f:
        f.write('12345')
attacks = {
    'prio_pgrp': lambda: os.setpriority(os.PRIO_PGRP, os.getpgid(1), 11),
    'prio_user': lambda: os.setpriority(os.PRIO_USER, os.getuid(), 12),
    'sched_idle': lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0)),
    'rlimit_stack': lambda: lower(resource.RLIMIT_STACK, 1 << 20),
    'rlimit_nproc': lambda: lower(resource.RLIMIT_NPROC, 9),
    'uclamp': uclamp,
    'timerslack': slack,
}
try:
    attacks[WHAT]()
    print(json.dumps(True))
except OSError:
    print(json.dumps(False))
"""


@pytest.mark.parametrize("what", ["prio_pgrp", "prio_user", "sched_idle", "rlimit_stack", "rlimit_nproc", "uclamp",
                                  "timerslack"])  # fmt: skip
def test_more_changes_to_the_init_cost_the_container_never_a_run(pool: Any, what: str) -> None:
    """Whatever took, the host-side reset sees it (nice, policy, rlimits, clamps, /proc files of the init) and
    replaces the container: the next run is OK and sees the pristine init."""
    before = _run(pool, LOOK)
    assert before.status is S.OK, before
    (cid,) = _wait_pooled(pool)
    tamper = _run(pool, MORE_TAMPER.replace("WHAT", repr(what)))
    assert (tamper.status, tamper.exit_code) == (S.OK, 0), tamper
    took = json.loads(tamper.stdout)
    if what == "timerslack":
        assert not took, "the init's timer slack is writable"
    now = _wait_pooled(pool)
    assert (now != {cid}) == took, (what, took)
    after = _run(pool, LOOK)
    assert after.status is S.OK, after
    assert json.loads(after.stdout) == json.loads(before.stdout)


#: Every way at the init's memory and page-table state. Prints what each attempt got (errno name, or 'ok').
AT_INIT_MEMORY = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
got = {}
def attempt(name, fn):
    try:
        fn()
        got[name] = 'ok'
    except OSError as exc:
        got[name] = errno.errorcode.get(exc.errno, str(exc.errno))
def checked(ret):
    if ret < 0:
        raise OSError(ctypes.get_errno(), 'failed')
def open_close(path, flags):
    os.close(os.open(path, flags))
def write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
def read(path):
    with open(path, 'rb') as f:
        f.read(64)
class Iovec(ctypes.Structure):
    _fields_ = (('base', ctypes.c_void_p), ('len', ctypes.c_size_t))
def vm(fn):
    buf = ctypes.create_string_buffer(64)
    local, remote = Iovec(ctypes.addressof(buf), 64), Iovec(0x400000, 64)
    checked(fn(1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
attempt('open mem r', lambda: open_close('/proc/1/mem', os.O_RDONLY))
attempt('open mem rw', lambda: open_close('/proc/1/mem', os.O_RDWR))
attempt('open mem w', lambda: open_close('/proc/1/mem', os.O_WRONLY))
for value in (b'1', b'2', b'3', b'4', b'5'):  # referenced/accessed bits, soft-dirty, peak RSS
    attempt(f'write clear_refs {value.decode()}', lambda v=value: write('/proc/1/clear_refs', v))
for name in ('pagemap', 'smaps', 'smaps_rollup', 'maps', 'environ', 'auxv', 'stack', 'syscall'):
    attempt(f'read {name}', lambda n=name: read(f'/proc/1/{n}'))
for name in ('fd', 'map_files', 'root', 'cwd'):
    attempt(f'list {name}', lambda n=name: os.listdir(f'/proc/1/{n}'))
attempt('process_vm_readv', lambda: vm(libc.process_vm_readv))
attempt('process_vm_writev', lambda: vm(libc.process_vm_writev))
attempt('ptrace seize', lambda: checked(libc.ptrace(0x4206, 1, 0, 0)))  # PTRACE_SEIZE: would not stop it
print(json.dumps(got), flush=True)
"""


@pytest.mark.parametrize("fast", [False, True], ids=["exec", "in-process"])
def test_the_init_memory_and_page_table_state_are_out_of_a_runs_reach(pool: Any, fast: bool) -> None:
    """Reading ``/proc/1/mem`` (or ``pagemap``) or writing ``/proc/1/clear_refs`` changes the init's present,
    referenced and soft-dirty page bits, which the next run could observe. The init is not dumpable: none of
    it is open to the sandbox uid, although the init runs as that uid."""
    r = _run(pool, AT_INIT_MEMORY, fast=fast)
    assert (r.status, r.exit_code) == (S.OK, 0), r
    got = json.loads(r.stdout)
    assert len(got) == 23, got
    assert {k: v for k, v in got.items() if v not in ("EACCES", "EPERM")} == {}, got
    after = _run(pool, LOOK)
    assert after.status is S.OK, after


#: Every way at the run's supervisor (root, non-dumpable) the sandbox uid might have. Prints what worked.
AT_SUPERVISOR = r"""
import ctypes, errno, fcntl, json, os, signal, resource
libc = ctypes.CDLL(None, use_errno=True)
me = os.getpid()
def uid_of(p):
    return [l.split()[1] for l in open(f'/proc/{p}/status') if l.startswith('Uid:')][0]
roots = [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, me) and uid_of(p) == '0']
worked = []
def attempt(name, fn):
    try:
        ret = fn()
    except (OSError, ValueError):
        return
    if ret is None or ret >= 0:
        worked.append(name)
for c in roots:
    for sig in range(1, 65):
        if sig in (32, 33):  # glibc's own
            continue
        attempt(f'kill {sig}', lambda: os.kill(c, sig))
    def via_pidfd():
        fd = os.pidfd_open(c)
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        finally:
            os.close(fd)
    attempt('pidfd_send_signal', via_pidfd)
    for name in ('environ', 'mem', 'maps', 'smaps', 'auxv', 'stack', 'syscall', 'pagemap', 'io', 'fdinfo/0',
                 'ns/pid', 'root/etc/hostname'):
        attempt(f'read {name}', lambda: len(open(f'/proc/{c}/{name}', 'rb').read(1)) * 0)
    for name in ('fd', 'cwd', 'root', 'map_files'):
        attempt(f'list {name}', lambda: len(os.listdir(f'/proc/{c}/{name}')) * 0)
    for fd in range(0, 16):
        for flags in (os.O_RDONLY, os.O_WRONLY | os.O_NONBLOCK):
            def reopen():
                os.close(os.open(f'/proc/{c}/fd/{fd}', flags))
            attempt(f'open fd {fd}', reopen)
    for name in ('mem', 'oom_score_adj', 'coredump_filter', 'comm', 'clear_refs', 'timerslack_ns', 'autogroup'):
        def write():
            fd = os.open(f'/proc/{c}/{name}', os.O_WRONLY)
            try:
                os.write(fd, b'1')
            finally:
                os.close(fd)
        attempt(f'write {name}', write)
    attempt('ptrace attach', lambda: libc.ptrace(16, c, 0, 0))  # PTRACE_ATTACH
    attempt('ptrace seize', lambda: libc.ptrace(0x4206, c, 0, 0))  # PTRACE_SEIZE
    attempt('prlimit', lambda: resource.prlimit(c, resource.RLIMIT_NOFILE, (1, 1)))
    attempt('setpriority', lambda: os.setpriority(os.PRIO_PROCESS, c, 19))
    attempt('sched_setaffinity', lambda: os.sched_setaffinity(c, {0}))
    attempt('sched_setscheduler', lambda: os.sched_setscheduler(c, os.SCHED_IDLE, os.sched_param(0)))
    if os.getpgid(c) != 0:  # its group is outside this pid namespace: 0
        attempt('setpgid', lambda: os.setpgid(0, os.getpgid(c)))
    def sigio():
        r, w = os.pipe()
        fcntl.fcntl(r, fcntl.F_SETOWN, c)
        fcntl.fcntl(r, fcntl.F_SETSIG, signal.SIGKILL)
        fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
        os.write(w, b'x')
        return -1  # delivery is checked by the run's status, not here
    attempt('sigio', sigio)
attempt('ptrace traceme', lambda: libc.ptrace(0, 0, 0, 0))  # would make the supervisor our tracer
print(json.dumps({'roots': roots, 'worked': worked}), flush=True)
os._exit(MODE)
"""


@pytest.mark.parametrize("mode", [0, 7])
@pytest.mark.parametrize("fast", [False, True], ids=["exec", "in-process"])
def test_supervisor_cannot_be_signalled_traced_read_or_reopened(pool: Any, fast: bool, mode: int) -> None:
    r = _run(pool, AT_SUPERVISOR.replace("MODE", str(mode)), fast=fast)
    assert (r.status, r.exit_code) == ((S.OK, 0) if mode == 0 else (S.NONZERO_EXIT, 7)), r
    got = json.loads(r.stdout)
    assert len(got["roots"]) == 1, got  # the run's supervisor was found, and attacked
    assert got["worked"] == [], got
    after = _run(pool, LOOK)
    assert after.status is S.OK, after
    assert json.loads(after.stdout)["procs"] == sorted(["0", str(pool._config.uid)]), after.stdout  # supervisor, init


#: ``clone`` with a chosen exit signal: with CLONE_PARENT the child is the SUPERVISOR's child, so its exit
#: signal would go to the supervisor; an orphan is reparented to the supervisor (the subreaper) too.
CLONE_SIGNAL = r"""
import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
NR = {'x86_64': 56, 'aarch64': 220}[os.uname().machine]
CLONE_PARENT = 0x00008000
def clone(flags):
    return libc.syscall(NR, flags, 0, 0, 0, 0)
for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP, signal.SIGSEGV):
    pid = clone(CLONE_PARENT | sig)
    if pid == 0:
        os._exit(0)
    pid = os.fork()
    if pid == 0:  # an orphan-to-be whose own child exits with the signal after being reparented
        if clone(sig) == 0:
            time.sleep(0.05)
            os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
time.sleep(0.3)
print('still here', flush=True)
raise SystemExit(3)
"""


@pytest.mark.parametrize("fast", [False, True], ids=["exec", "in-process"])
def test_exit_signal_tricks_cannot_kill_the_supervisor_or_change_the_status(pool: Any, fast: bool) -> None:
    r = _run(pool, CLONE_SIGNAL, fast=fast)
    assert (r.status, r.exit_code, r.stdout) == (S.NONZERO_EXIT, 3, b"still here\n"), r


#: The program exits 0 at once while its tree races the supervisor's final kill: a fork bomb up to the pids
#: limit, stopped processes, double-forked daemons in new sessions, zombies whose parent is stopped.
RACE = r"""
import os, signal, time
def bomb():
    while True:
        try:
            if os.fork() == 0:
                continue
        except OSError:
            time.sleep(0.001)
def fork():
    try:
        return os.fork()
    except OSError:
        return -1
for _ in range(4):
    if fork() == 0:
        os.setsid()
        if fork() == 0:
            if fork() == 0:
                os._exit(0)  # a zombie of a stopped parent
            os.kill(os.getpid(), signal.SIGSTOP)
            bomb()
        bomb()
time.sleep(0.2)
os._exit(0)
"""


def test_a_tree_racing_the_supervisor_kill_changes_neither_status_nor_next_run(pool: Any) -> None:
    r = _run(pool, RACE)
    assert (r.status, r.exit_code) == (S.OK, 0), r
    after = _run(pool, LOOK)
    assert after.status is S.OK, after
    assert json.loads(after.stdout)["procs"] == sorted(["0", str(pool._config.uid)]), after.stdout


def test_a_program_that_stops_itself_times_out_it_does_not_report_a_stop_as_an_exit(pool: Any) -> None:
    """A stop is no exit: the supervisor keeps waiting (``ptrace`` is refused, so it is never a tracer that
    would be told about the stop), the worker's clock ends the run."""
    r = _run(pool, "import os, signal\nprint('x', flush=True)\nos.kill(os.getpid(), signal.SIGSTOP)", timeout_s=1.0)
    assert (r.status, r.exit_code, r.stdout) == (S.TIMEOUT, None, b"x\n"), r
    after = _run(pool, LOOK)
    assert after.status is S.OK, after


EXHAUST = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for d in ('/tmp', '/dev/shm', '/work'):
    i = 0
    try:
        while True:
            with open(f'{d}/fill{i}', 'wb') as f:
                f.write(b'x' * (1 << 20))
            i += 1
    except OSError:
        pass
    try:
        for _ in range(5000):
            os.mkdir(f'{d}/inode{i}')
            i += 1
    except OSError:
        pass
n = 0
while n < 4096 and libc.shmget(0x5300 + n, 4096, 0o1000 | 0o666) >= 0:
    n += 1
for i in range(256):
    if libc.semget(0x7300 + i, 1, 0o1000 | 0o666) < 0 or libc.msgget(0x9300 + i, 0o1000 | 0o666) < 0:
        break
print(n, flush=True)
"""

USE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for d in ('/tmp', '/dev/shm', '/work'):
    with open(f'{d}/x', 'wb') as f:
        f.write(b'y' * (4 << 20))
    os.mkdir(f'{d}/dir')
assert libc.shmget(0x5300, 4096, 0o1000 | 0o2000 | 0o666) >= 0  # IPC_CREAT | IPC_EXCL: nothing left
assert libc.semget(0x7300, 1, 0o1000 | 0o2000 | 0o666) >= 0
print('ok')
"""


def test_exhausting_the_container_does_not_reach_the_next_run(pool: Any) -> None:
    r = _run(pool, EXHAUST, timeout_s=30)
    assert (r.status, r.exit_code) == (S.OK, 0), r
    after = _run(pool, USE)
    assert (after.status, after.stdout) == (S.OK, b"ok\n"), after
