"""The worker's watch on a run's TCP queues: what the kernel charges to no cgroup, enforced from outside.

Why: a TCP connection that is not accepted yet lives in its listener's accept queue with no cgroup charged for
it (the memory cgroup is attached at accept()), and so does the data queued on it; a socket closed with data
unsent, or one past its cgroup's limit, still queues about a page per socket. One run held ~670 MiB that way
under a 128 MiB limit on both cgroup versions, against the host-wide TCP limit this machine's services share.
The run's own network namespace lists every TCP socket it has, accepted or not, orphaned or not, with the
bytes queued on it (``/proc/<pid>/net/tcp{,6}``): the worker sums them while the run runs and ends a run whose
queues exceed its share (a ``memory_limit``, the run's own failure). It is a poll (``output_pump.pump``: 20 ms
after the spawn, then every 10 ms, or 20x as long as a read took on a loaded host), so a run can overshoot by
what it sends in that time.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable

from workers.sandbox.api import SandboxStatus

#: A run's TCP queues may hold this fraction of its memory limit.
QUEUE_SHARE_DIVISOR = 8
_PAGE = 4096
_LISTEN = "0A"  # a listener's queue columns count connections, not bytes
_SYN_SENT = "02"
#: What a connecting socket can have queued: its SYN and at most one segment of data (TCP Fast Open).
_SYN_SENT_MAX = 64 * 1024 + 1


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


def netns_queued_bytes(pid: int) -> int:
    """What the TCP sockets of ``pid``'s network namespace have queued. The tables are read only when the
    namespace has TCP sockets at all (a table read walks the whole hash, ~5 ms each where it is the host's)."""
    if tcp_sockets(_read(f"/proc/{pid}/net/sockstat") + _read(f"/proc/{pid}/net/sockstat6")) == 0:
        return 0
    return sum(queued_bytes(_read(f"/proc/{pid}/net/{name}")) for name in ("tcp", "tcp6"))


def netns_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


class TcpQueueWatch:
    """Called by the output pump while the run runs: ``MEMORY_LIMIT`` once the run's queues exceed ``limit``.

    ``pids`` lists the processes of the run (its cgroup); network namespaces in ``foreign`` (the worker's,
    a container's init's) are not the run's and are skipped; each namespace is read once.
    """

    def __init__(self, pids: Callable[[], Iterable[int]], limit: int, foreign: Iterable[str | None]) -> None:
        self._pids = pids
        self._limit = limit
        self._foreign = {ns for ns in foreign if ns is not None}
        self._member: tuple[int, str] | None = None  # a process of the run's namespace, and that namespace
        self.peak = 0

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
        total = 0
        for pid in self._namespaces():
            with contextlib.suppress(ValueError):
                total += netns_queued_bytes(pid)
        self.peak = max(self.peak, total)
        return SandboxStatus.MEMORY_LIMIT if total > self._limit else None


def own_netns() -> str | None:
    """The worker's own network namespace (never a run's)."""
    return netns_of(os.getpid())
