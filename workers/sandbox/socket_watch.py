"""The worker's watch on a run's TCP sockets: what the kernel charges to no cgroup, bounded from outside.

Why: a TCP connection that is not accepted yet lives in its listener's accept queue with no cgroup charged for
it (the memory cgroup is attached at accept()), and so does the data queued on it; a socket over its cgroup's
limit still takes a segment per direction (forced charges). One run held ~670 MiB that way under a 128 MiB
limit, against the host-wide TCP limit this machine's services share.

What bounds it, by construction rather than by the speed of a poll:

* Per socket. SO_RCVBUF is a no-op (``seccomp``) and each run's network namespace has small defaults
  (``boot_common.RUN_NETNS_SYSCTLS``: a 4 KiB default receive buffer, accept queues of 64): a pending
  connection holds a few KiB (its buffer and the one segment its small window lets in), a socket over its
  cgroup's limit one segment more; no TCP socket of a run holds more than ``SOCKET_WORST`` (a 64 KiB loopback
  segment) outside the run's limit.
* Per run. The watch reads the namespace's ``sockstat`` (its own ``inuse`` counts: a few lines, the same cost
  whatever the run holds, ~0.1 ms) on every poll, and ends a run with more TCP sockets than ``sockets_max``
  (its share, an eighth of its memory limit, over ``SOCKET_WORST``: 256 sockets for a 128 MiB run) as a
  ``memory_limit``. Nothing it reads grows with what a run holds, so no run can slow the poll down (the
  queue tables it used to read walk every socket: ~6 ms for 400 sockets here, and the pump then waits 20x as
  long before the next poll).

Worst case per run, held outside its memory limit: ``sockets_max * SOCKET_WORST`` (the share: 16 MiB for 128
MiB; a few KiB per socket in practice) plus the sockets it opens in one poll interval (10 ms; ~600-900 pending
connections on this machine, a few KiB each) plus, on cgroup v1, the socket share of the limit itself
(``cgroups.split_for_sockets``, charged). ``bench_socket_hoard`` measures it: the largest host TCP rises seen
are in docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable

from workers.sandbox.api import SandboxStatus

#: A run's TCP sockets may hold this fraction of its memory limit outside it.
QUEUE_SHARE_DIVISOR = 8
#: The most one TCP socket of a run can hold outside the run's limit (see the module's docstring).
SOCKET_WORST = 64 * 1024
#: A run may always have this many TCP sockets, however small its limit (a 1 MiB allowance).
SOCKETS_MIN = 16


def queue_limit(memory_bytes: int) -> int:
    """The bytes a run's TCP sockets may hold outside its memory limit (its share): ``sockets_max`` of it."""
    return memory_bytes // QUEUE_SHARE_DIVISOR


def tcp_sockets(sockstat: str) -> int:
    """The ``inuse`` counts of TCP and TCP6 in /proc/net/sockstat{,6} (per network namespace)."""
    total = 0
    for line in sockstat.splitlines():
        proto, _, rest = line.partition(":")
        fields = rest.split()
        if proto in ("TCP", "TCP6") and "inuse" in fields:
            total += int(fields[fields.index("inuse") + 1])
    return total


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError:
        return ""


def sockets_max(limit: int) -> int:
    """The TCP sockets a run whose share is ``limit`` bytes may have at once."""
    return max(SOCKETS_MIN, limit // SOCKET_WORST)


def netns_sockets(pid: int) -> int:
    """The TCP sockets of ``pid``'s network namespace, from its own sockstat files (a few counters)."""
    return tcp_sockets(_read(f"/proc/{pid}/net/sockstat") + _read(f"/proc/{pid}/net/sockstat6"))


def netns_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


class TcpQueueWatch:
    """Called by the output pump while the run runs: ``MEMORY_LIMIT`` once the run has more TCP sockets than its
    share ``limit`` (bytes) allows (see the module's docstring for the rule and its worst case).

    ``pids`` lists the processes of the run (its cgroup); network namespaces in ``foreign`` (the worker's,
    a container's init's) are not the run's and are skipped; each namespace is read once.
    """

    def __init__(self, pids: Callable[[], Iterable[int]], limit: int, foreign: Iterable[str | None]) -> None:
        self._pids = pids
        self._sockets_max = sockets_max(limit)
        self._foreign = {ns for ns in foreign if ns is not None}
        self._member: tuple[int, str] | None = None  # a process of the run's namespace, and that namespace
        self.peak = 0  # the most sockets seen at once

    def _namespaces(self) -> list[int]:
        """One pid per network namespace of the run (it cannot make more: unshare and setns are refused)."""
        if self._member is not None and netns_of(self._member[0]) == self._member[1]:
            return [self._member[0]]
        found: dict[str, int] = {}
        for pid in self._pids():
            ns = netns_of(pid)
            if ns is not None and ns not in self._foreign:
                found.setdefault(ns, pid)
        if len(found) == 1:
            ((ns, pid),) = found.items()
            self._member = (pid, ns)
        return list(found.values())

    def __call__(self) -> SandboxStatus | None:
        sockets = 0
        for pid in self._namespaces():
            with contextlib.suppress(ValueError):
                sockets += netns_sockets(pid)
        self.peak = max(self.peak, sockets)
        return SandboxStatus.MEMORY_LIMIT if sockets > self._sockets_max else None


def own_netns() -> str | None:
    """The worker's own network namespace (never a run's)."""
    return netns_of(os.getpid())
