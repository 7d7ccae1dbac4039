"""Issue 16 items 7 and 8 on every backend: socket memory counts against the run's limit, and nothing one run
leaves in the kernel (sockets, counters, IPC, pid numbers, sysctls, hostname...) is visible to the next.

The docker backend runs here with a pool of ONE container, so the second run lands in the very container the
first one used. The hoarding program holds what it can for a moment while the host reads /proc/net/sockstat
(its ``mem`` fields are host-wide): before the fix a run held about its whole budget there.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from schemas.settings import Settings
from workers.sandbox.api import Sandbox
from workers.sandbox.api import SandboxStatus as S
from workers.sandbox.cgroups import v1_memory_mounted
from workers.sandbox.factory import make_sandbox

from .conftest import BACKENDS, audit, run_py

pytestmark = pytest.mark.sandbox


def _load_hoarder() -> Any:
    """benchmarks/ is a script directory, not an installed package: load the file itself."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_socket_hoard.py"
    spec = importlib.util.spec_from_file_location("bench_socket_hoard", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_socket_hoard", module)
    spec.loader.exec_module(module)
    return module


hoard = _load_hoarder().hoard

MEMORY_MB = 128
BUDGET_MB = 256  # twice the limit: an uncharged family holds all of it


@pytest.fixture(scope="module")
def docker_pool_of_one(sandbox_settings: Settings, docker_sandbox: Sandbox) -> Iterator[Any]:
    sb: Any = make_sandbox(sandbox_settings.model_copy(update={"sandbox_pool_size": 1}), "docker")
    try:
        yield sb
    finally:
        sb.close()


@pytest.fixture(params=BACKENDS)
def same_box(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A backend where consecutive runs share whatever the backend reuses (docker: one pooled container)."""
    name = "docker_pool_of_one" if request.param == "docker" else f"{request.param}_sandbox"
    backend: Any = request.getfixturevalue(name)
    yield backend
    assert not audit(backend), f"{request.param} left something behind"


def _settled(sb: Any, deadline_s: float = 30.0) -> None:
    """Docker: wait until the one container is back in the pool (the next run then reuses it)."""
    pools = getattr(getattr(sb, "pool", None), "_pools", None)
    if not pools:  # not docker, or no run yet (the pool is made by the first one)
        return
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not sb.pool._busy and sum(p.qsize() for p in pools.values()) >= 1:
            return
        time.sleep(0.01)
    raise AssertionError("the container did not come back to the pool")


# ---- item 7: socket memory ------------------------------------------------------------------------------


#: Every family that holds TCP or UDP memory (see ``bench_socket_hoard``): the charged ones, and the ones the
#: kernel charges to no cgroup (never accepted, SYN floods, orphaned sockets and processes).
SOCKET_FAMILIES = ("tcp", "tcp-backlog", "tcp6-backlog", "tcp-many", "tcp-syn", "tcp-orphan", "tcp-fork", "udp")
#: What the host's TCP/UDP memory may rise by for a 128 MiB run. cgroup v1 charges socket buffers to a sixteenth
#: of the limit (``cgroups.split_for_sockets``), so the rise is that share plus what no cgroup pays for: three
#: quarters of the limit is the bound. The design's worst case is the watch's share (16 MiB) plus one poll
#: interval of new sockets (a few KiB each) plus the 8 MiB charged share; the largest rise measured in 800
#: hoarding runs (4 processes each, both backends, idle and with two CPU hogs) was 54 MiB, 7-11 MiB typical
#: (docs/benchmarks.md); 267 MiB before. cgroup v2 charges them to ``memory.max`` itself, so a run may fill
#: its whole limit with them: there the bound is the limit plus the uncharged share and a margin.
RISE_BOUND_MB = MEMORY_MB * 3 // 4 if v1_memory_mounted() else MEMORY_MB + 32


@pytest.mark.parametrize("family", SOCKET_FAMILIES)
def test_tcp_and_udp_buffers_count_against_the_memory_limit(sandbox: Sandbox, family: str) -> None:
    """Connections filled and never read, the same never accepted (charged to no cgroup by the kernel: small by
    the namespace's defaults, counted by the worker's watch), thousands of them with a few KiB each, SYN floods,
    connections closed with their data unsent (sockets without an fd), hoarders whose parents exited, datagrams
    to oneself: the host's TCP/UDP memory rises by well under the run's limit, never by the budget."""
    got = hoard(sandbox, family, memory_mb=MEMORY_MB, budget_mb=BUDGET_MB, procs=2, hold_s=0.5)
    assert got.status != S.SANDBOX_ERROR.value, got
    proto = "UDP" if family.startswith("udp") else "TCP"
    # cgroup v2 charges them to memory.max itself (the kernel lets one segment per socket past a limit); v1 to
    # the run's socket share; what no cgroup is charged for is bounded per socket and counted by the watch.
    assert got.sock_pages_rise_mb[proto] < RISE_BOUND_MB, got


@pytest.mark.parametrize("family", ["unix", "unixdgram", "unix-inflight"])
def test_unix_socket_buffers_count_against_the_memory_limit(sandbox: Sandbox, family: str) -> None:
    got = hoard(sandbox, family, memory_mb=MEMORY_MB, budget_mb=BUDGET_MB, procs=2, hold_s=0.5)
    assert got.status == S.MEMORY_LIMIT.value, got


TCP_OPTIONS = r"""
import errno, json, socket, struct
out = {}
s = socket.socket()
addr = struct.pack('<HH4s120x', socket.AF_INET, 0, bytes([10, 0, 0, 1]))
md5 = addr + struct.pack('<BBHi', 0, 0, 16, 0) + b'k' * 80
for name, opt, value in (('md5', 14, md5), ('md5_ext', 32, md5), ('ulp', 31, b'tls'),
                         ('ao_add', 38, b'\0' * 256), ('nodelay', socket.TCP_NODELAY, 1)):
    try:
        s.setsockopt(socket.IPPROTO_TCP, opt, value)
        out[name] = 'ok'
    except OSError as exc:
        out[name] = errno.errorcode[exc.errno]
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
out['rcvbuf'] = s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) > 0
print(json.dumps(out))
"""


def test_tcp_options_holding_uncharged_memory_are_refused(sandbox: Sandbox) -> None:
    """MD5 and TCP-AO keys and ULPs live in socket option memory no cgroup is charged for (200 sockets of MD5
    keys held ~60 MiB outside a 6 MiB cgroup): refused; ordinary options work."""
    r = run_py(sandbox, TCP_OPTIONS)
    assert r.status is S.OK, r
    got = json.loads(r.stdout)
    refused = ("md5", "md5_ext", "ulp", "ao_add")
    assert {k: got[k] for k in refused} == dict.fromkeys(refused, "EPERM"), got
    assert (got["nodelay"], got["rcvbuf"]) == ("ok", True), got


RECEIVE_BUFFERS = r"""
import json, socket
out = {}
lst = socket.socket()
out['default'] = lst.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
lst.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)  # succeeds...
out['listener'] = lst.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)  # ...and changes nothing
try:
    lst.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE (needs CAP_NET_ADMIN: EPERM without the filter)
    out['force'] = 'ok'
except OSError as exc:
    out['force'] = exc.strerror
lst.bind(('127.0.0.1', 0)); lst.listen(8)
c = socket.create_connection(lst.getsockname())
other = socket.socket()
other.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)  # send buffers are charged: still set
out['sndbuf_set'] = other.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 16384  # the kernel doubles it
c.sendall(b'x' * 100000)  # more than the pending connection's buffer: the rest waits in c's (charged) queue
a, _ = lst.accept()
out['accepted'] = a.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
got = 0
while got < 100000:
    got += len(a.recv(1 << 16))
out['received'] = got
print(json.dumps(out))
"""


def test_receive_buffer_sizes_are_the_namespace_default(sandbox: Sandbox) -> None:
    """SO_RCVBUF (inherited by a listener's pending connections, which no cgroup pays for) is a successful
    no-op: a listener asking for 8 MiB keeps the run's 4 KiB default, and data still flows."""
    r = run_py(sandbox, RECEIVE_BUFFERS)
    assert r.status is S.OK, r
    got = json.loads(r.stdout)
    assert got["default"] == got["listener"] == 4096, got
    assert got["force"] == "ok", got
    assert got["sndbuf_set"] is True, got
    assert got["accepted"] <= 1 << 20, got  # autotuned at most to the namespace's tcp_rmem max
    assert got["received"] == 100000, got


NETNS_LIMITS = r"""
import json
names = ('net/ipv4/tcp_rmem', 'net/core/somaxconn', 'net/core/optmem_max')
def value(name):
    try:
        return ' '.join(open('/proc/sys/' + name).read().split())
    except FileNotFoundError:  # not a namespace's own on this kernel (optmem_max before 6.9)
        return None
print(json.dumps({n: value(n) for n in names}))
"""


def _host_sysctls() -> dict[str, str]:
    names = ("net/ipv4/tcp_rmem", "net/core/somaxconn", "net/core/optmem_max")
    return {n: " ".join(Path("/proc/sys", n).read_text().split()) for n in names}


def test_each_run_network_namespace_is_limited(sandbox: Sandbox) -> None:
    """The run's own namespace gets small defaults (a pending connection's buffer, accept queues, option
    memory), written per run by its supervisor; the host's (and so the worker's) stay as they were."""
    host = _host_sysctls()
    for _ in range(2):
        r = run_py(sandbox, NETNS_LIMITS)
        assert r.status is S.OK, r
        got = json.loads(r.stdout)
        assert got.pop("net/core/optmem_max") in ("20480", None), r.stdout
        assert got == {"net/ipv4/tcp_rmem": "4096 4096 1048576", "net/core/somaxconn": "64"}
    assert _host_sysctls() == host


THROUGHPUT = r"""
import json, os, socket, time
total = 64 << 20

def rate(server, client):
    # MB/s of ``total`` bytes from a forked writer on ``client`` to this process reading ``server``
    pid = os.fork()
    if pid == 0:
        server.close(); buf = b'x' * (1 << 16); sent = 0
        while sent < total:
            sent += client.send(buf)
        client.close(); os._exit(0)
    client.close(); t0 = time.monotonic(); got = 0; buf = bytearray(1 << 20)
    while True:
        n = server.recv_into(buf)
        if not n:
            break
        got += n
    dt = time.monotonic() - t0
    os.waitpid(pid, 0)
    assert got == total, got
    return got / dt / 1e6

lst = socket.socket(); lst.bind(('127.0.0.1', 0)); lst.listen(64)
c = socket.create_connection(lst.getsockname()); a, _ = lst.accept()
tcp = rate(a, c)
clients = []
for _ in range(64):  # a burst of 64 connects lands in one accept queue at once
    clients.append(socket.create_connection(lst.getsockname(), timeout=5))
print(json.dumps({'tcp_mb_per_s': tcp, 'burst': len(clients)}))
"""


def test_honest_loopback_traffic_keeps_its_speed(sandbox: Sandbox) -> None:
    """Sanity: 64 MiB over the run's TCP loopback (4 KiB default buffers, autotuned up to 1 MiB) at hundreds of
    MB/s here (side by side in a throwaway namespace, 300-1,300 MB/s with these sizes and with the host's alike:
    this machine's noise is larger than the difference), and a burst of 64 connections fits the accept queue.
    The floor is one that only a broken setup misses: the emulated cgroup v2 guest does ~12 MB/s."""
    r = run_py(sandbox, THROUGHPUT, timeout_s=120)
    assert r.status is S.OK, r
    got = json.loads(r.stdout)
    assert got["burst"] == 64, got
    assert got["tcp_mb_per_s"] > 4, got


# ---- item 8: nothing of one run is visible to the next --------------------------------------------------

RUN_OWNED_SYSCTLS = ("/proc/sys/fs/mqueue/", "/proc/sys/kernel/msg", "/proc/sys/kernel/sem", "/proc/sys/kernel/shm",
                     "/proc/sys/kernel/auto_msgmni", "/proc/sys/kernel/pid_max")  # fmt: skip

LEAVE = r"""
import ctypes, errno, json, os, resource, socket, time
libc = ctypes.CDLL(None, use_errno=True)
done = {}
def attempt(name, fn):
    try:
        fn()
        done[name] = 'ok'
    except OSError as exc:
        done[name] = errno.errorcode.get(exc.errno, str(exc.errno))
# sockets that outlive the process: TIME_WAIT after an active close, a half-closed peer, a bound port
srv = socket.socket(); srv.bind(('127.0.0.1', 40123)); srv.listen()
for _ in range(20):
    c = socket.create_connection(('127.0.0.1', 40123)); a, _ = srv.accept(); c.close(); a.close()
c6 = socket.socket(socket.AF_INET6); srv6 = socket.socket(socket.AF_INET6); srv6.bind(('::1', 40124)); srv6.listen()
c6.connect(('::1', 40124)); a6, _ = srv6.accept(); c6.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 40125))
u.sendto(b'x' * 999, ('127.0.0.1', 40125))
ab = socket.socket(socket.AF_UNIX); ab.bind('\0rs-leftover'); ab.listen()
# IPC objects (SysV and POSIX)
libc.shmget(0x5253, 4096, 0o1000 | 0o666); libc.semget(0x5254, 1, 0o1000 | 0o666); libc.msgget(0x5255, 0o1000 | 0o666)
try:
    rt = ctypes.CDLL('librt.so.1', use_errno=True)
    done['mq'] = 'ok' if rt.mq_open(b'/rs-left', os.O_CREAT | os.O_RDWR, 0o666, None) >= 0 else 'failed'
except OSError:
    done['mq'] = 'no librt'
# files everywhere writable
for d in ('/tmp', '/dev/shm', '/work'):
    attempt('file ' + d, lambda d=d: open(d + '/rs-left', 'w').write('hidden'))
# cgroup counters: fork until the pids limit refuses (pids.events), burn cpu (cpu.stat, throttling)
kids = []
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(5); os._exit(0)
    kids.append(pid)
done['forked'] = len(kids)
for pid in kids:
    os.kill(pid, 9); os.waitpid(pid, 0)
end = time.monotonic() + 0.2
while time.monotonic() < end:
    pass
# kernel state a process of the sandbox uid might change for everyone
attempt('hostname', lambda: socket.sethostname('rs-left'))
def add_key():
    if libc.syscall({'x86_64': 248, 'aarch64': 217}[os.uname().machine], b'user', b'rs', b'x', 1, -4) < 0:
        raise OSError(ctypes.get_errno(), 'add_key')
attempt('add_key', add_key)
writable = []
for root, dirs, files in os.walk('/proc/sys'):
    for f in files:
        path = os.path.join(root, f)
        try:  # write back what is there: a write the kernel takes is a value a run could change
            value = open(path, 'rb').read()
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, value or b'0')
                writable.append(path)
            finally:
                os.close(fd)
        except OSError:
            pass
done['writable_sysctls'] = writable
for path, value in (('/proc/sys/kernel/shmmax', b'4242'), ('/proc/sys/fs/mqueue/queues_max', b'7')):
    attempt('set ' + path, lambda path=path, value=value: open(path, 'wb').write(value))
attempt('rlimit', lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (77, 77)))
for _ in range(333):  # shift the pid counter
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
print(json.dumps(done))
"""

CHECK = r"""
import json, os, resource, socket
def text(path):
    try:
        return open(path).read()
    except OSError as exc:
        return type(exc).__name__
def rows(path):
    try:
        return len(open(path).read().splitlines()) - 1
    except OSError:
        return None
counters = {}
if os.path.isdir('/sys/fs/cgroup'):
    for root, dirs, files in os.walk('/sys/fs/cgroup'):
        for f in files:
            try:
                counters[os.path.join(root, f)] = open(os.path.join(root, f)).read()
            except OSError:
                pass
try:
    c = socket.socket(socket.AF_UNIX); c.connect('\0rs-leftover'); abstract = 'connected'
except OSError as exc:
    abstract = type(exc).__name__
try:
    b = socket.socket(); b.bind(('127.0.0.1', 40123)); port = 'free'
except OSError as exc:
    port = type(exc).__name__
print(json.dumps({
    'net': {n: rows('/proc/net/' + n) for n in ('tcp', 'tcp6', 'udp', 'udp6', 'unix', 'raw', 'packet')},
    'sysvipc': [rows('/proc/sysvipc/' + n) for n in ('shm', 'sem', 'msg')],
    'mqueue': sorted(os.listdir('/dev/mqueue')) if os.path.isdir('/dev/mqueue') else None,
    'files': {d: sorted(os.listdir(d)) for d in ('/tmp', '/dev/shm', '/work')},
    'counters': counters, 'abstract': abstract, 'port': port,
    'hostname': socket.gethostname(), 'pid': os.getpid(), 'env': dict(os.environ),
    'nofile': resource.getrlimit(resource.RLIMIT_NOFILE),
    'sysctl': {n: text('/proc/sys/' + n) for n in ('net/core/somaxconn', 'kernel/hostname', 'kernel/shmmax',
                                                   'kernel/pid_max', 'fs/mqueue/queues_max')},
}, sort_keys=True))
"""


def test_nothing_a_run_leaves_in_the_kernel_reaches_the_next_run(same_box: Any) -> None:
    """Every channel of the family: TIME_WAIT and half-closed TCP (v4 and v6), a bound UDP port with a queued
    datagram, an abstract unix socket, SysV and POSIX IPC, files in every writable place, the cgroup counters
    (a run hit the pids limit and burned cpu), the hostname, keyrings, writable sysctls, rlimits, environment
    and the pid counter (333 forks): the next run sees exactly what a run saw before."""
    _settled(same_box)
    before = run_py(same_box, CHECK, timeout_s=60)
    assert before.status is S.OK, before.stderr.decode()[-2000:]
    _settled(same_box)
    left = run_py(same_box, LEAVE, timeout_s=120)  # ~1 s of cpu here; much more in the emulated v2 guest
    assert left.status is S.OK, left
    done = json.loads(left.stdout)
    assert done["forked"] > 0, done
    assert done["file /tmp"] == "ok", done
    assert (done["hostname"], done["add_key"]) == ("EPERM", "EPERM"), done
    # A run owns its IPC and pid namespaces: their sysctls die with it.
    assert all(p.startswith(RUN_OWNED_SYSCTLS) for p in done["writable_sysctls"]), done
    _settled(same_box)
    after = run_py(same_box, CHECK, timeout_s=60)
    assert after.status is S.OK, after
    assert json.loads(after.stdout) == json.loads(before.stdout)
    seen = json.loads(after.stdout)
    assert (seen["abstract"], seen["port"]) == ("ConnectionRefusedError", "free"), seen
    assert seen["counters"] == {}, "the run can read cgroup counters"


def test_a_run_can_use_its_own_loopback(sandbox: Sandbox) -> None:
    """What the per-run namespace keeps: a TCP server on localhost inside the run (v4 and v6) and UDP."""
    code = r"""
import socket, threading
for fam, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):
    srv = socket.socket(fam); srv.bind((host, 0)); srv.listen(8)
    def serve():
        a, _ = srv.accept(); a.sendall(a.recv(100).upper()); a.close()
    t = threading.Thread(target=serve); t.start()
    c = socket.create_connection(srv.getsockname()[:2]); c.sendall(b'ping'); print(c.recv(100).decode()); t.join()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 0)); u.sendto(b'udp', u.getsockname())
print(u.recv(10).decode())
"""
    r = run_py(sandbox, code)
    assert (r.status, r.stdout) == (S.OK, b"PING\nPING\nudp\n"), r


def test_localhost_is_the_runs_own_loopback(sandbox: Sandbox) -> None:
    """``localhost`` resolves inside a run (SandboxFusion's tests serve on it) to the run's own loopback only."""
    code = r"""
import socket
names = sorted({a[4][0] for a in socket.getaddrinfo('localhost', 80, proto=socket.IPPROTO_TCP)})
srv = socket.create_server(('localhost', 0)); port = srv.getsockname()[1]
c = socket.create_connection(('localhost', port)); a, _ = srv.accept(); a.sendall(b'hi'); print(names, c.recv(2))
"""
    r = run_py(sandbox, code)
    assert r.status is S.OK, r
    assert r.stdout.decode().split(" b")[0] in ("['127.0.0.1']", "['127.0.0.1', '::1']", "['::1', '127.0.0.1']"), r
    assert r.stdout.endswith(b"'hi'\n"), r
