"""How much host kernel memory one hostile run can hold in socket buffers, against its memory limit.

Usage: python -m benchmarks.bench_socket_hoard [--backend process|docker] [--memory-mb 128]
       [--family tcp,tcp-backlog,...] [--budget-mb 768] [--hold-s 3] [--repeat 1]

The program (run only inside the sandbox) forks up to ``--procs`` processes that each open as many sockets
of one family as they can, ask for the largest buffers (SO_SNDBUF/SO_RCVBUF, inherited by a listener's
connections) and fill them without ever reading, until the run as a whole has queued ``--budget-mb`` (a safety
stop: the host's TCP/UDP limits are shared with this machine's services, and AF_UNIX has no host-wide limit at
all), then hold them for ``--hold-s``. Meanwhile the host samples /proc/meminfo and /proc/net/sockstat{,6}
every 5 ms. Printed per run: what the run queued, the host's peak drop in MemAvailable and rise in TCP/UDP
``mem`` pages, and the run's own peak as its cgroup accounted it. Host memory held outside the limit is
roughly ``mem_available_drop - cgroup_peak``. ``--repeat N`` runs each family N times and prints the largest
rises last.

Families (``FAMILIES``):
  tcp            connections accepted, never read (charged to the run: its limit holds)
  tcp-backlog    connections never accepted (charged to no cgroup), filled, listeners as big as allowed
  tcp6-backlog   the same on ::1
  tcp-many       thousands of never-accepted connections with a few KiB each, across many listeners
  tcp-syn        a SYN flood to itself: connects (with Fast Open data) to listeners whose queues are full
  tcp-orphan     connections closed with their data unsent (sockets that hold no fd)
  tcp-fork       tcp-backlog from orphaned processes (each hoarder's parent has exited)
  tcp-read       accepted connections read until their windows grew, then filled (charged; one forced segment
                 per socket past a full cgroup)
  udp / udp6     datagrams to oneself, never read
  unix / unixdgram / unix-inflight   socket pairs filled; the last with the sockets themselves in flight
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from schemas.backends import BACKENDS, Backend
from schemas.settings import Settings
from workers.sandbox.api import Sandbox, SandboxResult, SandboxSpec
from workers.sandbox.factory import make_sandbox

FAMILIES = (
    "tcp", "tcp-backlog", "tcp6-backlog", "tcp-many", "tcp-syn", "tcp-orphan", "tcp-fork", "tcp-read", "udp",
    "udp6", "unix", "unixdgram", "unix-inflight",
)  # fmt: skip

#: The hostile program: argv = family, processes, budget bytes, hold seconds.
HOARD = r"""
import array, errno, os, socket, sys, time
family, procs, budget, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
share = budget // procs
BIG = 1 << 30
V6 = family.startswith('tcp6') or family == 'udp6'
FAM, HOST = (socket.AF_INET6, '::1') if V6 else (socket.AF_INET, '127.0.0.1')
try:
    QUEUE = min(4096, int(open('/proc/sys/net/core/somaxconn').read())) + 1  # what one accept queue holds
except OSError:
    QUEUE = 4097
MSG_FASTOPEN = 0x20000000

def grow(s):
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            s.setsockopt(socket.SOL_SOCKET, opt, BIG)
        except OSError:
            pass

def fill(s, chunk, queued, dest=None, limit=None):
    s.setblocking(False)
    stop = share if limit is None else min(share, queued + limit)
    while queued < stop:
        try:
            n = s.sendto(chunk, dest) if dest else s.send(chunk)
        except (BlockingIOError, OSError):
            return queued, False
        queued += n
    return queued, True

def listener(backlog=4096):
    lst = socket.socket(FAM); grow(lst); lst.bind((HOST, 0)); lst.listen(backlog)
    return lst

def tcp(keep, queued, chunk):
    lst, pending = listener(), 0
    keep.append(lst)
    per_conn = 4096 if family == 'tcp-many' else None
    while queued < share:
        if family != 'tcp' and family != 'tcp-orphan' and family != 'tcp-read' and pending >= QUEUE:
            lst, pending = listener(), 0  # the accept queue is full: another listener
            keep.append(lst)
        c = socket.socket(FAM); grow(c); c.settimeout(2.0)
        try:
            c.connect(lst.getsockname()[:2])
        except socket.timeout:
            c.close(); lst, pending = listener(), 0; keep.append(lst)
            continue
        keep.append(c)
        pending += 1
        if family in ('tcp', 'tcp-orphan', 'tcp-read'):  # accepted (and never read again)
            a, _ = lst.accept(); grow(a); keep.append(a)
            if family == 'tcp-read':  # grow the windows first: send and read 4 MiB
                for _ in range(64):
                    c.sendall(chunk[:65536 // 2]); c.sendall(chunk[:65536 // 2])
                    got = 0
                    while got < 65536:
                        got += len(a.recv(65536))
        queued, more = fill(c, chunk, queued, limit=per_conn)
        if family == 'tcp-orphan':  # closed with its data unsent: a socket that holds no fd
            keep.remove(c)
            c.close()
    return queued

def syn(keep, queued):
    # listeners whose accept queue is full, then non-blocking connects (with Fast Open data) piling up
    lst = listener(1)
    keep.append(lst)
    for _ in range(4):
        c = socket.socket(FAM); c.settimeout(0.5)
        try:
            c.connect(lst.getsockname()[:2]); keep.append(c)
        except OSError:
            c.close()
    while queued < share:
        c = socket.socket(FAM); c.setblocking(False)
        try:
            c.sendto(b'y' * 1000, MSG_FASTOPEN, lst.getsockname()[:2])
        except (BlockingIOError, OSError):
            try:
                c.connect_ex(lst.getsockname()[:2])
            except OSError:
                pass
        keep.append(c)
        queued += 1000
        if len(keep) % 200 == 0:
            lst = listener(1); keep.append(lst)
    return queued

def hoard():
    keep, queued = [], 0
    chunk = b'x' * 65000
    try:
        if family == 'tcp-syn':
            queued = syn(keep, queued)
        elif family.startswith('tcp'):
            queued = tcp(keep, queued, chunk)
        elif family.startswith('udp'):
            while queued < share:
                u = socket.socket(FAM, socket.SOCK_DGRAM); grow(u); u.bind((HOST, 0))
                keep.append(u)
                room = u.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)  # what the receive queue may hold
                for _ in range(room // len(chunk) + 2):
                    try:
                        u.sendto(chunk, u.getsockname()[:2])
                    except OSError:
                        break
                queued += room
        else:
            kind = socket.SOCK_STREAM if family != 'unixdgram' else socket.SOCK_DGRAM
            carrier = socket.socketpair(socket.AF_UNIX) if family == 'unix-inflight' else None
            while queued < share:
                a, b = socket.socketpair(socket.AF_UNIX, kind); grow(a); grow(b)
                for s in (a, b):
                    queued, _ = fill(s, chunk if kind == socket.SOCK_STREAM else chunk[:4096], queued)
                if carrier is None:
                    keep += [a, b]
                else:  # both ends in flight on the carrier, then closed here: held by the queue alone
                    carrier[0].setblocking(False)
                    try:
                        carrier[0].sendmsg([b'f'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                     array.array('i', [a.fileno(), b.fileno()]))])
                    except OSError:
                        keep += [a, b]
                        carrier = socket.socketpair(socket.AF_UNIX); keep += list(carrier)
                        continue
                    a.close(); b.close()
            if carrier is not None:
                keep += list(carrier)
    except OSError as exc:
        sys.stderr.write(f'{os.getpid()}: {exc}\n')
    os.write(1, f'{len(keep)} {queued}\n'.encode())
    sys.stdout.flush()
    time.sleep(hold)

kids = []
for _ in range(procs - 1):
    pid = os.fork()
    if pid == 0:
        if family == 'tcp-fork' and os.fork() != 0:
            os._exit(0)  # the hoarder is a grandchild, orphaned: its parent is gone
        hoard(); os._exit(0)
    kids.append(pid)
if family == 'tcp-fork':
    for pid in kids:
        os.waitpid(pid, 0)
    kids = []
hoard()
for pid in kids:
    os.waitpid(pid, 0)
if family == 'tcp-fork':
    time.sleep(hold)  # the orphans still hold theirs
"""


@dataclass(frozen=True, slots=True)
class Hoarded:
    """One hoarding run, measured from the host."""

    family: str
    status: str
    processes_reporting: int
    sockets: int
    queued_mb: float
    mem_available_drop_mb: float
    sock_pages_rise_mb: dict[str, float]
    cgroup_peak_mb: float
    stderr: str


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        out[key] = int(rest.split()[0])
    return out


def _sock_pages() -> dict[str, int]:
    """Host-wide ``mem`` pages per protocol (sockstat's mem fields are global, whatever the netns)."""
    out: dict[str, int] = {}
    for name in ("sockstat", "sockstat6"):
        for line in Path(f"/proc/net/{name}").read_text().splitlines():
            proto, _, rest = line.partition(":")
            fields = rest.split()
            if "mem" in fields:
                out[proto] = out.get(proto, 0) + int(fields[fields.index("mem") + 1])
    return out


def hoard(sandbox: Sandbox, family: str, *, memory_mb: int, budget_mb: int, procs: int, hold_s: float) -> Hoarded:
    """Run one hoarding program and sample the host while it holds its sockets."""
    spec = SandboxSpec(
        argv=("python3", "main.py", family, str(procs), str(budget_mb << 20), str(hold_s)),
        files={"main.py": HOARD.encode()},
        memory_mb=memory_mb,
        timeout_s=hold_s + 60,
        pids_limit=procs + 8,
    )
    base_mem, base_sock = _meminfo(), _sock_pages()
    results: list[SandboxResult] = []
    worker = threading.Thread(target=lambda: results.append(sandbox.run(spec)))
    worker.start()
    low, high = base_mem["MemAvailable"], dict(base_sock)
    while worker.is_alive():
        low = min(low, _meminfo()["MemAvailable"])
        for proto, pages in _sock_pages().items():
            high[proto] = max(high.get(proto, 0), pages)
        time.sleep(0.005)
    worker.join()
    (result,) = results
    lines = [line.split() for line in result.stdout.decode().splitlines() if line.strip()]
    return Hoarded(
        family=family,
        status=result.status.value,
        processes_reporting=len(lines),
        sockets=sum(int(n) for n, _ in lines),
        queued_mb=round(sum(int(q) for _, q in lines) / 2**20, 1),
        mem_available_drop_mb=round((base_mem["MemAvailable"] - low) / 1024, 1),
        sock_pages_rise_mb={p: round((high[p] - base_sock.get(p, 0)) * 4 / 1024, 1) for p in high},
        cgroup_peak_mb=round(result.max_rss_kb / 1024, 1),
        stderr=result.stderr.decode(errors="replace")[-300:],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="process", choices=BACKENDS)
    ap.add_argument("--family", default=",".join(FAMILIES))
    ap.add_argument("--memory-mb", type=int, default=128)
    ap.add_argument("--budget-mb", type=int, default=768)
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--hold-s", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    backend: Backend = args.backend
    sandbox = make_sandbox(Settings(), backend)
    worst: dict[str, dict[str, float]] = {}
    try:
        for family in args.family.split(","):
            for _ in range(args.repeat):
                out = hoard(sandbox, family, memory_mb=args.memory_mb, budget_mb=args.budget_mb,
                            procs=args.procs, hold_s=args.hold_s)  # fmt: skip
                print(json.dumps(asdict(out)), flush=True)
                top = worst.setdefault(family, {"runs": 0})
                top["runs"] += 1
                for proto, mb in out.sock_pages_rise_mb.items():
                    top[proto] = max(top.get(proto, 0.0), mb)
                top["mem_available_drop_mb"] = max(top.get("mem_available_drop_mb", 0.0), out.mem_available_drop_mb)
        print(json.dumps({"max_rise_mb": worst}), flush=True)
    finally:
        sandbox.close()


if __name__ == "__main__":
    main()
