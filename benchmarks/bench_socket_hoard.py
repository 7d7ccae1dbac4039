"""How much host kernel memory one hostile run can hold in socket buffers, against its memory limit.

Usage: python -m benchmarks.bench_socket_hoard [--backend process|docker] [--memory-mb 128]
       [--family tcp,tcp-backlog,tcp-orphan,udp,unix,unixdgram] [--budget-mb 768] [--hold-s 3]

The program (run only inside the sandbox) forks up to ``--procs`` processes that each open as many sockets
of one family as they can, enlarge their buffers as far as allowed, and fill them without ever reading, until
the run as a whole has queued ``--budget-mb`` (a safety stop: the host's TCP/UDP limits are shared with this
machine's services, and AF_UNIX has no host-wide limit at all), then hold them for ``--hold-s``. Meanwhile the
host samples /proc/meminfo and /proc/net/sockstat{,6}. Printed per family: what the run queued, the host's
peak drop in MemAvailable and rise in TCP/UDP ``mem`` pages, and the run's own peak as its cgroup accounted
it. Host memory held outside the limit is roughly ``mem_available_drop - cgroup_peak``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from schemas.settings import Settings
from workers.sandbox.api import Sandbox, SandboxResult, SandboxSpec
from workers.sandbox.factory import Backend, make_sandbox

#: The hostile program: argv = family, processes, budget bytes, hold seconds.
HOARD = r"""
import errno, os, socket, sys, time
family, procs, budget, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
share = budget // procs
BIG = 1 << 30

def grow(s):
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            s.setsockopt(socket.SOL_SOCKET, opt, BIG)
        except OSError:
            pass

def fill(s, chunk, queued, dest=None):
    s.setblocking(False)
    while queued < share:
        try:
            n = s.sendto(chunk, dest) if dest else s.send(chunk)
        except (BlockingIOError, OSError):
            return queued, False
        queued += n
    return queued, True

def hoard():
    keep, queued = [], 0
    chunk = b'x' * 65000
    lst = None
    if family.startswith('tcp'):
        lst = socket.socket(); grow(lst); lst.bind(('127.0.0.1', 0)); lst.listen(4096); keep.append(lst)
    try:
        while queued < share:
            if family.startswith('tcp'):
                c = socket.socket(); grow(c); c.settimeout(2.0)
                try:
                    c.connect(lst.getsockname())
                except socket.timeout:  # the accept queue is full: another listener
                    c.close()
                    lst = socket.socket(); grow(lst); lst.bind(('127.0.0.1', 0)); lst.listen(4096)
                    keep.append(lst)
                    continue
                keep.append(c)
                if family != 'tcp-backlog':  # accepted, never read (tcp-backlog: never even accepted)
                    a, _ = lst.accept(); grow(a); keep.append(a)
                queued, more = fill(c, chunk, queued)
                if family == 'tcp-orphan':  # closed with its data unsent: a socket that holds no fd
                    keep.remove(c)
                    c.close()
            elif family == 'udp':
                u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); grow(u); u.bind(('127.0.0.1', 0))
                keep.append(u)
                room = u.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)  # what the receive queue may hold
                for _ in range(room // len(chunk) + 2):
                    try:
                        u.sendto(chunk, u.getsockname())
                    except OSError:
                        break
                queued += room
            else:
                kind = socket.SOCK_STREAM if family == 'unix' else socket.SOCK_DGRAM
                a, b = socket.socketpair(socket.AF_UNIX, kind); grow(a); grow(b); keep += [a, b]
                for s in (a, b):
                    queued, _ = fill(s, chunk if kind == socket.SOCK_STREAM else chunk[:4096], queued)
    except OSError as exc:
        sys.stderr.write(f'{os.getpid()}: {exc}\n')
    os.write(1, f'{len(keep)} {queued}\n'.encode())
    sys.stdout.flush()
    time.sleep(hold)

kids = []
for _ in range(procs - 1):
    pid = os.fork()
    if pid == 0:
        hoard(); os._exit(0)
    kids.append(pid)
hoard()
for pid in kids:
    os.waitpid(pid, 0)
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
        time.sleep(0.05)
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
    ap.add_argument("--backend", default="process", choices=("process", "docker"))
    ap.add_argument("--family", default="tcp,tcp-backlog,tcp-orphan,udp,unix,unixdgram")
    ap.add_argument("--memory-mb", type=int, default=128)
    ap.add_argument("--budget-mb", type=int, default=768)
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--hold-s", type=float, default=3.0)
    args = ap.parse_args()
    backend: Backend = args.backend
    sandbox = make_sandbox(Settings(), backend)
    try:
        for family in args.family.split(","):
            out = hoard(sandbox, family, memory_mb=args.memory_mb, budget_mb=args.budget_mb, procs=args.procs,
                        hold_s=args.hold_s)  # fmt: skip
            print(json.dumps(asdict(out)), flush=True)
    finally:
        sandbox.close()


if __name__ == "__main__":
    main()
