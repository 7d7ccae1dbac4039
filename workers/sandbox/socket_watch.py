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


def _read_at(fd: int) -> str:
    """A /proc seq file read again from its start (the kernel regenerates it on each read from offset 0)."""
    chunks = []
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks).decode("ascii", "replace")


def netns_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


class _NetnsFiles:
    """The socket tables of one network namespace, opened once: an open /proc/<pid>/net file keeps its namespace,
    so later reads see the run's sockets even after that process exited and its pid was reused."""

    _NAMES = ("sockstat", "sockstat6", "tcp", "tcp6")

    def __init__(self, pid: int) -> None:
        self._fds: dict[str, int] = {}
        try:
            for name in self._NAMES:
                with contextlib.suppress(FileNotFoundError):  # the v6 tables of a kernel without IPv6
                    self._fds[name] = os.open(f"/proc/{pid}/net/{name}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.close()
            raise

    def _text(self, name: str) -> str:
        fd = self._fds.get(name)
        return "" if fd is None else _read_at(fd)

    def queued_bytes(self) -> int:
        """What the namespace's TCP sockets have queued. The tables are read only when it has TCP sockets at all
        (a table read walks the whole hash, ~5 ms each where it is the host's)."""
        if tcp_sockets(self._text("sockstat") + self._text("sockstat6")) == 0:
            return 0
        return queued_bytes(self._text("tcp")) + queued_bytes(self._text("tcp6"))

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class TcpQueueWatch:
    """Called by the output pump while the run runs: ``MEMORY_LIMIT`` once the run's queues exceed ``limit``.

    ``pids`` lists the processes of the run (its cgroup); network namespaces in ``foreign`` (the worker's,
    a container's init's) are not the run's and are skipped. The run's namespace is found once (it cannot make
    another: unshare and setns are refused) and its tables are kept open until ``close``; a use as a context
    manager closes them.
    """

    def __init__(self, pids: Callable[[], Iterable[int]], limit: int, foreign: Iterable[str | None]) -> None:
        self._pids = pids
        self._limit = limit
        self._foreign = {ns for ns in foreign if ns is not None}
        self._files: _NetnsFiles | None = None
        self.peak = 0

    def __enter__(self) -> TcpQueueWatch:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._files is not None:
            self._files.close()
            self._files = None

    def _run_namespace(self) -> _NetnsFiles | None:
        if self._files is not None:
            return self._files
        for pid in self._pids():
            ns = netns_of(pid)
            if ns is None or ns in self._foreign:
                continue
            with contextlib.suppress(OSError):
                files = _NetnsFiles(pid)
                if netns_of(pid) == ns:  # still the same process: the files are that namespace's
                    self._files = files
                    return files
                files.close()
        return None

    def __call__(self) -> SandboxStatus | None:
        files = self._run_namespace()
        if files is None:
            return None
        try:
            total = files.queued_bytes()
        except OSError:
            return None
        self.peak = max(self.peak, total)
        return SandboxStatus.MEMORY_LIMIT if total > self._limit else None


def own_netns() -> str | None:
    """The worker's own network namespace (never a run's)."""
    return netns_of(os.getpid())
