"""The docker warm pool's entry-server path: pristine reuse of the SAME container, unforgeable status, lifecycle.

Runs in a pooled container go through its entry server (no ``docker exec``); these tests pin what that path
must keep: a run is entered exactly like a ``docker exec --user`` process, nothing one run leaves (files in
every writable place, FIFOs, a daemon, an abstract socket, SysV IPC, message queues, edited work files)
reaches the next run in the very same container, and the candidate cannot forge its status.
Hostile programs run only inside the docker sandbox under test.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from schemas.settings import Settings
from workers.sandbox.api import Sandbox, SandboxSpec
from workers.sandbox.api import SandboxStatus as S
from workers.sandbox.audit import tagged_pids
from workers.sandbox.docker_entry import TAG_PREFIX
from workers.sandbox.factory import make_sandbox

pytestmark = pytest.mark.sandbox

FAST = ("python3", "-I", "-S", "-B", "-c")  # the grader's harness flags: run in-process by the entry server


@pytest.fixture(scope="module")
def pool_of_one(docker_sandbox: Sandbox, sandbox_settings: Settings) -> Iterator[Any]:
    """A docker backend with ONE warm container, so consecutive runs reuse the same container."""
    sb: Any = make_sandbox(sandbox_settings.model_copy(update={"sandbox_pool_size": 1}), "docker")
    try:
        yield sb
        assert sb.audit(wait_s=10.0) == []
    finally:
        sb.close()


def _pooled(sb: Any) -> set[str]:
    return {c.cid for pool in sb.pool._pools.values() for c in list(pool.queue)}


def _wait_pooled(sb: Any, deadline_s: float = 30.0) -> set[str]:
    """The pooled containers once background work settled, trimmed to ONE (later runs must all use it)."""
    end = time.monotonic() + deadline_s
    last: set[str] = set()
    stable_since = time.monotonic()
    while time.monotonic() < end:
        found = _pooled(sb)
        if found != last or sb.pool._busy:
            last, stable_since = found, time.monotonic()
        elif found and time.monotonic() - stable_since > 0.3:
            break
        time.sleep(0.02)
    else:
        raise AssertionError("no container came back to the pool")
    for pool in sb.pool._pools.values():
        while pool.qsize() > 1:
            sb.pool.remove(pool.get_nowait().cid)
    return _pooled(sb)


def _run(sb: Any, code: str, *, fast: bool = False, **kw: Any) -> Any:
    if fast:
        return sb.run(SandboxSpec(argv=(*FAST, code), **kw))
    return sb.run(SandboxSpec(argv=("python3", "main.py"), files={"main.py": code.encode()}, **kw))


def test_pooled_runs_use_the_entry_server(pool_of_one: Any) -> None:
    assert _run(pool_of_one, "print(1)").stdout == b"1\n"
    (cid,) = _wait_pooled(pool_of_one)
    container = next(c for pool in pool_of_one.pool._pools.values() for c in list(pool.queue) if c.cid == cid)
    assert container.entry is not None
    assert container.entry.alive()


def test_naive_mode_is_container_per_run_through_docker_exec(sandbox_settings: Settings) -> None:
    sb: Any = make_sandbox(sandbox_settings.model_copy(update={"sandbox_pool_size": 0}), "docker")
    try:
        assert sb.pool._nsenter is None
        r = sb.run(SandboxSpec(argv=("sh", "-c", "echo hi")))
        assert (r.status, r.stdout) == (S.OK, b"hi\n"), r
        assert sb.audit(wait_s=10.0) == []
    finally:
        sb.close()


SAME_AS_INIT = """
import json, os
def status(pid):
    keep = ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp')
    out = {}
    for line in open(f'/proc/{pid}/status'):
        k, _, v = line.partition(':')
        if k in keep:
            out[k] = v.split()
    return out
ns = {n: os.readlink(f'/proc/self/ns/{n}') for n in ('mnt', 'uts', 'ipc', 'net', 'pid', 'cgroup', 'user')}
print(json.dumps({
    'status_self': status('self'), 'status_init': status(1), 'ns': ns,
    'cgroup_same': open('/proc/self/cgroup').read() == open('/proc/1/cgroup').read(),
    'fds': sorted(int(x) for x in os.listdir('/proc/self/fd')),
    'cwd': os.getcwd(), 'umask': os.umask(0o22), 'env': dict(os.environ),
}))
"""


@pytest.mark.parametrize("fast", [False, True], ids=["exec", "in-process"])
def test_entered_program_is_exactly_like_a_docker_exec_one(pool_of_one: Any, fast: bool) -> None:
    """Same uid/gid/groups, no capability at all, no-new-privs, seccomp, namespaces and cgroups as pid 1."""
    (cid,) = _wait_pooled(pool_of_one)
    init_pid = next(c.init_pid for pool in pool_of_one.pool._pools.values() for c in list(pool.queue) if c.cid == cid)
    r = _run(pool_of_one, SAME_AS_INIT, fast=fast)
    assert r.status is S.OK, r
    got = json.loads(r.stdout)
    # The init is not dumpable: its namespaces are compared from here (root), not by the program. The network
    # and IPC namespaces are the run's own (nothing in them outlives the run); every other one is the container's.
    init_ns = {n: os.readlink(f"/proc/{init_pid}/ns/{n}") for n in got["ns"]}
    own = {"net", "ipc"}
    assert {n: v for n, v in got["ns"].items() if n not in own} == {n: v for n, v in init_ns.items() if n not in own}
    assert all(got["ns"][n] != init_ns[n] for n in own), (got["ns"], init_ns)
    assert got["status_self"] == got["status_init"]
    assert got["status_self"]["Uid"] == [str(pool_of_one._config.uid)] * 4
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(got["status_self"][cap][0], 16) == 0, cap
    assert got["status_self"]["NoNewPrivs"] == ["1"]
    assert got["status_self"]["Seccomp"] == ["2"]
    assert got["cgroup_same"]
    assert got["fds"] in ([0, 1, 2], [0, 1, 2, 3])  # 3: the directory listdir itself has open
    assert (got["cwd"], got["umask"]) == ("/work", 0o22)
    assert "PATH" in got["env"]
    assert not any(k.startswith(("RS_", "DOCKER")) for k in got["env"])


POISON = r"""
import ctypes, json, os, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
writable = []
for root, dirs, files in os.walk('/'):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ('/proc', '/sys')]
    if os.access(root, os.W_OK):
        writable.append(root)
left = []
for d in writable:
    for name, make in (('rs-poison', lambda p: open(p, 'w').write('x')), ('rs-fifo', os.mkfifo),
                       ('rs-dir', os.mkdir), ('rs-link', lambda p: os.symlink('/etc/passwd', p))):
        try:
            make(os.path.join(d, name))
            left.append(os.path.join(d, name))
        except OSError:
            pass
    try:
        os.chmod(d, 0o777)
    except OSError:
        pass
    try:
        os.setxattr(d, 'user.rs-poison', b'x')
    except OSError:
        pass
open('main.py', 'a').write('\nraise SystemExit(99)\n')  # the cwd's files, edited
shm = libc.shmget(0x5253, 4096, 0o1000 | 0o666)
sem = libc.semget(0x5254, 1, 0o1000 | 0o666)
msg = libc.msgget(0x5255, 0o1000 | 0o666)
try:
    os.close(os.open('/dev/mqueue/rs-left', os.O_CREAT | os.O_WRONLY, 0o666))
except OSError:
    pass
r, w = os.pipe()
if os.fork() == 0:  # a daemon: new session, double fork, no stdio, an abstract socket, rewriting files
    os.setsid()
    if os.fork() == 0:
        signal_ok = True
        try:
            import signal
            for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(s, signal.SIG_IGN)
        except Exception:
            signal_ok = False
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind('\0rs-poison')
        srv.listen(1)
        os.write(w, b'up')
        for fd in (0, 1, 2):
            os.close(fd)
        while True:
            for d in writable:
                try:
                    open(os.path.join(d, 'rs-daemon'), 'w').write('alive')
                except OSError:
                    pass
            time.sleep(0.005)
    os._exit(0)
os.read(r, 2)
print(json.dumps({'writable': writable, 'left': left, 'ipc': [shm >= 0, sem >= 0, msg >= 0]}))
"""

CHECK = r"""
import json, os, socket
writable = []
for root, dirs, files in os.walk('/'):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ('/proc', '/sys')]
    if os.access(root, os.W_OK):
        writable.append(root)
entries = {d: sorted(os.listdir(d)) for d in writable}
procs = []
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) != os.getpid():
        try:
            uid = [l.split()[1] for l in open(f'/proc/{p}/status') if l.startswith('Uid:')][0]
            procs.append([int(p), open(f'/proc/{p}/cmdline', 'rb').read().split(b'\0')[0].decode(), uid])
        except OSError:
            pass
def rows(p):
    return len(open(p).read().splitlines()) - 1
ipc = [rows('/proc/sysvipc/shm'), rows('/proc/sysvipc/sem'), rows('/proc/sysvipc/msg')]
mq = sorted(os.listdir('/dev/mqueue')) if os.path.isdir('/dev/mqueue') else []
try:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect('\0rs-poison')
    abstract = 'connected'
except OSError as exc:
    abstract = type(exc).__name__
modes = {d: [oct(os.stat(d).st_mode & 0o7777), os.stat(d).st_uid, os.listxattr(d)] for d in writable}
print(json.dumps({'writable': writable, 'entries': entries, 'procs': procs, 'ipc': ipc, 'mq': mq,
                  'abstract': abstract, 'main': open('main.py').read(), 'modes': modes}))
"""


def test_nothing_of_a_run_reaches_the_next_run_in_the_same_container(pool_of_one: Any) -> None:
    baseline = _run(pool_of_one, CHECK)
    assert baseline.status is S.OK, baseline
    before = json.loads(baseline.stdout)
    (cid,) = _wait_pooled(pool_of_one)
    poison = _run(pool_of_one, POISON)
    assert poison.status is S.OK, poison
    made = json.loads(poison.stdout)
    assert {"/work", "/tmp", "/dev/shm"} <= set(made["writable"]), made["writable"]
    for d in ("/work", "/tmp", "/dev/shm"):
        # (mkfifo is mknodat, refused by the seccomp policy: a FIFO cannot even be made)
        assert {f"{d}/rs-poison", f"{d}/rs-dir", f"{d}/rs-link"} <= set(made["left"]), made["left"]
    assert made["ipc"] == [True, True, True]
    assert _wait_pooled(pool_of_one) == {cid}, "the poisoned container was not reset and reused"
    for _ in range(2):  # the very same container, twice (a slow daemon would show up the second time)
        r = _run(pool_of_one, CHECK)
        assert r.status is S.OK, r
        after = json.loads(r.stdout)
        assert after["writable"] == made["writable"] == before["writable"]
        assert after["entries"] == {d: (["main.py"] if d == "/work" else []) for d in after["writable"]}
        assert after["modes"] == before["modes"]
        assert after["ipc"] == [0, 0, 0]
        assert after["mq"] == []
        assert after["abstract"] == "ConnectionRefusedError"
        assert after["main"] == CHECK
        # Only the container's idle init and this run's root supervisor, nothing of the sandbox uid but pid 1.
        others = [p for p in after["procs"] if p[0] != 1]
        assert [p[2] for p in others] == ["0"], after["procs"]
        assert _wait_pooled(pool_of_one) == {cid}


FORGE = r"""
import json, os, signal
me = os.getpid()
opened, signalled = [], []
for p in os.listdir('/proc'):
    if not p.isdigit() or int(p) == me:
        continue
    try:
        fds = os.listdir(f'/proc/{p}/fd')
    except OSError:
        fds = []
    for fd in fds:
        try:
            f = os.open(f'/proc/{p}/fd/{fd}', os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        opened.append([int(p), int(fd)])
        try:
            os.write(f, (0).to_bytes(4, 'big'))
        except OSError:
            pass
        os.close(f)
    if int(p) != 1:
        for s in (signal.SIGKILL, signal.SIGSTOP, signal.SIGUSR1):
            try:
                os.kill(int(p), s)
                signalled.append(int(p))
            except OSError:
                pass
own = sorted(int(x) for x in os.listdir('/proc/self/fd'))
print(json.dumps({'opened': opened, 'signalled': signalled, 'own': own}), flush=True)
os._exit(MODE)
"""


@pytest.mark.parametrize("fast", [False, True], ids=["exec", "in-process"])
def test_candidate_cannot_forge_its_status(pool_of_one: Any, fast: bool) -> None:
    """The status comes from the run's supervisor (root, non-dumpable): the candidate can reach none of its
    fds, cannot signal it, and its own exit code or signal is what gets reported."""
    for mode, status, exit_code in (("7", S.NONZERO_EXIT, 7), ("0", S.OK, 0)):
        r = _run(pool_of_one, FORGE.replace("MODE", mode), fast=fast)
        assert (r.status, r.exit_code) == (status, exit_code), r
        got = json.loads(r.stdout)
        assert all(pid == 1 for pid, _ in got["opened"]), got  # at most the idle init's (same uid) stdio
        assert got["signalled"] == [], got
        assert got["own"] in ([0, 1, 2], [0, 1, 2, 3]), got
    r = _run(pool_of_one, "import os, signal\nprint('x', flush=True)\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert (r.status, r.signal, r.stdout) == (S.CRASHED, signal.SIGSEGV, b"x\n"), r
    # A forged start marker or a status-shaped write on stdout is just output.
    r = _run(pool_of_one, "import sys\nsys.stdout.buffer.write(b'<rs-start-0000000000000000>\\0\\0\\0\\0')\n")
    assert (r.status, r.exit_code) == (S.OK, 0), r
    assert r.stdout == b"<rs-start-0000000000000000>\0\0\0\0"


def test_a_dead_entry_server_costs_a_container_not_a_verdict(pool_of_one: Any) -> None:
    _wait_pooled(pool_of_one)
    for pool in pool_of_one.pool._pools.values():
        for c in list(pool.queue):
            os.kill(c.entry.pid, signal.SIGKILL)
            c.entry._proc.wait()
    r = _run(pool_of_one, "print('fine')")
    assert (r.status, r.stdout) == (S.OK, b"fine\n"), r
    _wait_pooled(pool_of_one)
    assert pool_of_one.audit(wait_s=10.0) == []


def test_timeout_discards_the_container_and_leaves_nothing(pool_of_one: Any) -> None:
    (cid,) = _wait_pooled(pool_of_one)
    r = _run(pool_of_one, "import os, time\nos.fork()\ntime.sleep(60)", timeout_s=1.0)
    assert r.status is S.TIMEOUT, r
    assert _wait_pooled(pool_of_one) != {cid}
    assert pool_of_one.audit(wait_s=10.0) == []


def test_close_stops_every_entry_server(sandbox_settings: Settings) -> None:
    sb: Any = make_sandbox(sandbox_settings.model_copy(update={"sandbox_pool_size": 2}), "docker")
    prefix = f"{TAG_PREFIX}{os.getpid()}-"
    try:
        assert _run(sb, "print(2)", fast=True).stdout == b"2\n"
        _wait_pooled(sb)
        mine = {e.pid for e in sb.pool._entries.values()}
        assert mine
        assert mine <= set(tagged_pids(prefix))
    finally:
        sb.close()
    assert not mine & set(tagged_pids(prefix))
    assert sb._api.containers(all=True, filters={"label": f"rewardstream.sandbox.owner={sb._config.owner}"}) == []


def test_oneshot_baseline_is_a_container_per_run_with_the_same_limits(sandbox_settings: Settings) -> None:
    """``run_oneshot`` (the benchmark's ``docker_run`` baseline): the run is the container's own command."""
    sb: Any = make_sandbox(sandbox_settings.model_copy(update={"sandbox_pool_size": 0}), "docker")
    code = (
        "import os, sys\n"
        "st = {l.split(':')[0]: l.split()[1] for l in open('/proc/self/status') if l.startswith(('Uid', 'CapBnd'))}\n"
        "print(os.getpid(), st['Uid'], int(st['CapBnd'], 16), sys.stdin.read())\n"
        "open('/etc/x', 'w')\n"
    )
    try:
        r = sb.run_oneshot(SandboxSpec(argv=("python3", "main.py"), files={"main.py": code.encode()}, stdin=b"IN"))
        assert r.status is S.NONZERO_EXIT, r
        assert r.stdout == f"1 {sb._config.uid} 0 IN\n".encode()  # pid 1 of its own container, no capability
        assert b"Read-only file system" in r.stderr
        r = sb.run_oneshot(SandboxSpec(argv=("sleep", "30"), timeout_s=1.0))
        assert r.status is S.TIMEOUT, r
        assert sb.audit(wait_s=10.0) == []
    finally:
        sb.close()


WORKER = """
import sys, time
from schemas.settings import Settings
from workers.sandbox.api import SandboxSpec
from workers.sandbox.factory import make_sandbox
sb = make_sandbox(Settings().model_copy(update={"sandbox_pool_size": 2}), "docker")
r = sb.run(SandboxSpec(argv=("python3", "-I", "-S", "-B", "-c", "print(1)")))
print(r.status.value, flush=True)
time.sleep(300)
"""


def test_worker_death_stops_its_entry_servers_and_the_next_worker_sweeps(sandbox_settings: Settings) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    worker = subprocess.Popen([sys.executable, "-c", WORKER], cwd=root, stdout=subprocess.PIPE)
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline() == b"ok\n"
        prefix = f"{TAG_PREFIX}{worker.pid}-"
        end = time.monotonic() + 30
        while len(tagged_pids(prefix)) < 2 and time.monotonic() < end:  # the pool refilled
            time.sleep(0.05)
        assert tagged_pids(prefix)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        end = time.monotonic() + 15
        while tagged_pids(prefix) and time.monotonic() < end:  # EOF on the control socket: they exit
            time.sleep(0.05)
        assert tagged_pids(prefix) == []
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()
    fresh: Any = make_sandbox(sandbox_settings.model_copy(update={"sandbox_pool_size": 0}), "docker")
    try:
        left = fresh._api.containers(all=True, filters={"label": "rewardstream.sandbox"})
        owners = [c["Labels"].get("rewardstream.sandbox.owner", "").split(":")[1:2] for c in left]
        assert [str(worker.pid)] not in owners
    finally:
        fresh.close()
