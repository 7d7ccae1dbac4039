"""The worker's watch on a run's TCP sockets: what the kernel charges to no cgroup, bounded from outside.

Why: a TCP connection that is not accepted yet lives in its listener's accept queue with no cgroup charged for
it (the memory cgroup is attached at accept()), and so does the data queued on it; a socket over its cgroup's
limit still takes one segment per direction (forced charges). One run held ~670 MiB that way under a 128 MiB
limit, against the host-wide TCP limit this machine's services share.

What bounds it, by construction rather than by the speed of a poll:

* Per socket. SO_RCVBUF is a no-op (``seccomp``) and each run's network namespace has small defaults
  (``boot_common.RUN_NETNS_SYSCTLS``: ``tcp_rmem`` default 16 KiB, accept queues of 64): a pending connection
  queues at most its default buffer and a socket over its cgroup's limit one segment more, so no TCP socket
  of a run holds more than ``SOCKET_WORST`` (one 64 KiB loopback segment) outside the run's limit.
* Per run. The watch reads the namespace's ``sockstat`` (its own ``inuse`` counts, a few lines: constant
  cost, whatever the run holds) on every poll. While ``sockets * SOCKET_WORST`` is within the run's share
  (``queue_limit``: an eighth of its memory limit) nothing else is read. Past that (more than 256 sockets for
  a 128 MiB run) it reads the namespace's ``/proc/<pid>/net/tcp{,6}`` and counts what is queued, plus
  ``SOCKET_FLOOR`` per socket (its own kernel memory); more than ``sockets_max`` sockets (at most
  ``SOCKETS_MAX``, so that this read stays ~1 ms) is a ``memory_limit`` at once, tables unread.

Worst case per run, held outside its memory limit: the share (16 MiB for 128 MiB) plus what the run adds in one
poll interval, which ``output_pump`` keeps at 10 ms (20x a read's cost when it reads the tables, ~40 ms at
``SOCKETS_MAX``): sockets it opens then times at most ``SOCKET_WORST`` each, in practice its default buffer
(``bench_socket_hoard`` measures it: the largest host TCP rise seen is in docs/ARCHITECTURE.md).
Plus, on cgroup v1, the socket share of the limit itself (``cgroups.split_for_sockets``), which is charged.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable

from workers.sandbox.api import SandboxStatus

#: A run's TCP sockets may hold this fraction of its memory limit outside it.
QUEUE_SHARE_DIVISOR = 8
_PAGE = 4096
_LISTEN = "0A"  # a listener's queue columns count connections, not bytes
_SYN_SENT = "02"
#: What a connecting socket can have queued: its SYN and at most one segment of data (TCP Fast Open).
_SYN_SENT_MAX = 64 * 1024 + 1
#: The most one TCP socket of a run can hold outside the run's limit: a pending connection its default receive
#: buffer (16 KiB) and the segment let in past it, a charged socket the one segment per direction a full
#: cgroup is forced to take; a loopback segment is at most 64 KiB.
SOCKET_WORST = 64 * 1024
#: What every TCP socket holds of its own (the socket itself, ~2.5 KiB, a page-rounded queue): counted per
#: socket when the tables are read.
SOCKET_FLOOR = 4096
#: The most TCP sockets a run may have at once (fewer where its share is smaller: ``sockets_max``): reading
#: this many rows costs ~1 ms, so the poll never slows down by more than that, whatever a run holds.
SOCKETS_MAX = 1024


def queue_limit(memory_bytes: int) -> int:
    """The bytes a run's TCP sockets may have queued at once (sent and unacknowledged, received and unread)."""
    return memory_bytes // QUEUE_SHARE_DIVISOR


def queued_bytes(table: str) -> int:
    """Sum of ``tx_queue`` + ``rx_queue`` over the rows of a /proc/net/tcp{,6} table, listeners left out, each
    row rounded up to whole pages (what a socket with anything queued holds at least: memory is reserved per
    socket in pages, and one skb per socket is let through past any limit).

    A connecting socket counts at most ``_SYN_SENT_MAX``: the table is read without the socket's lock, and
    while ``connect`` runs its ``tx_queue`` is the initial sequence number minus 0 (up to 4 GiB of nothing;
    seen in the emulated guest as an honest run stopped for ``memory_limit``)."""
    total = 0
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 4 and fields[3] != _LISTEN:
            tx, _, rx = fields[4].partition(":")
            queued = int(tx, 16) + int(rx, 16)
            if fields[3] == _SYN_SENT:
                queued = min(queued, _SYN_SENT_MAX)
            total += -(-queued // _PAGE) * _PAGE
    return total


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
    return min(SOCKETS_MAX, limit // SOCKET_FLOOR)


def netns_sockets(pid: int) -> int:
    """The TCP sockets of ``pid``'s network namespace, from its own sockstat files (cheap: a few counters)."""
    return tcp_sockets(_read(f"/proc/{pid}/net/sockstat") + _read(f"/proc/{pid}/net/sockstat6"))


def netns_queued_bytes(pid: int) -> int:
    """What the TCP sockets of ``pid``'s network namespace have queued (a read walks every socket of it)."""
    return sum(queued_bytes(_read(f"/proc/{pid}/net/{name}")) for name in ("tcp", "tcp6"))


def netns_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


class TcpQueueWatch:
    """Called by the output pump while the run runs: ``MEMORY_LIMIT`` once what the run's TCP sockets can hold
    outside its limit exceeds ``limit`` (see the module's docstring for the rule and its worst case).

    ``pids`` lists the processes of the run (its cgroup); network namespaces in ``foreign`` (the worker's,
    a container's init's) are not the run's and are skipped; each namespace is read once.
    """

    def __init__(self, pids: Callable[[], Iterable[int]], limit: int, foreign: Iterable[str | None]) -> None:
        self._pids = pids
        self._limit = limit
        self._sockets_max = sockets_max(limit)
        self._foreign = {ns for ns in foreign if ns is not None}
        self._member: tuple[int, str] | None = None  # a process of the run's namespace, and that namespace
        self.peak = 0  # the largest estimate seen (bytes)
        self.tables_read = 0

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
        counted: list[tuple[int, int]] = []
        for pid in self._namespaces():
            with contextlib.suppress(ValueError):
                counted.append((pid, netns_sockets(pid)))
        sockets = sum(n for _, n in counted)
        if sockets > self._sockets_max:
            self.peak = max(self.peak, sockets * SOCKET_FLOOR)
            return SandboxStatus.MEMORY_LIMIT
        total = sockets * SOCKET_WORST
        if total > self._limit:  # too many sockets to bound by their count: what they hold, exactly
            self.tables_read += 1
            total = sockets * SOCKET_FLOOR
            for pid, n in counted:
                if n:
                    with contextlib.suppress(ValueError):
                        total += netns_queued_bytes(pid)
        self.peak = max(self.peak, total)
        return SandboxStatus.MEMORY_LIMIT if total > self._limit else None


def own_netns() -> str | None:
    """The worker's own network namespace (never a run's)."""
    return netns_of(os.getpid())
