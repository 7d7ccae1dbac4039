"""The TCP socket watch's arithmetic on sockstat (the real enforcement is in tests/sandbox)."""

from __future__ import annotations

import os

import pytest

from workers.sandbox import socket_watch
from workers.sandbox.api import SandboxStatus
from workers.sandbox.socket_watch import (
    SOCKET_WORST,
    SOCKETS_MIN,
    TcpQueueWatch,
    queue_limit,
    sockets_max,
    tcp_sockets,
)


def test_the_socket_budget_is_the_share_over_the_worst_a_socket_holds() -> None:
    assert queue_limit(128 << 20) == 16 << 20
    assert sockets_max(queue_limit(128 << 20)) == (16 << 20) // SOCKET_WORST == 256
    assert sockets_max(queue_limit(512 << 20)) == 1024
    assert sockets_max(queue_limit(4 << 20)) == SOCKETS_MIN == 16  # a tiny run still gets a few


def test_the_watch_stops_a_run_over_its_socket_budget_and_skips_foreign_namespaces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mine = os.readlink("/proc/self/ns/net")
    limit = 16 << 20
    monkeypatch.setattr(socket_watch, "netns_sockets", lambda pid: sockets_max(limit) + 1)
    watch = TcpQueueWatch(lambda: [os.getpid()], limit=limit, foreign=[mine])
    assert watch() is None  # the worker's own namespace is never counted
    over = TcpQueueWatch(lambda: [os.getpid(), os.getpid()], limit=limit, foreign=[None])
    assert over() is SandboxStatus.MEMORY_LIMIT
    assert over.peak == sockets_max(limit) + 1
    monkeypatch.setattr(socket_watch, "netns_sockets", lambda pid: sockets_max(limit))
    assert TcpQueueWatch(lambda: [os.getpid()], limit=limit, foreign=[None])() is None


def test_the_watch_reads_only_the_namespace_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a poll reads never grows with what the run holds: the namespace's sockstat files, nothing else."""
    opened: list[str] = []
    real_read = socket_watch._read

    def spy(path: str) -> str:
        opened.append(path.rsplit("/", 1)[1])
        return real_read(path)

    monkeypatch.setattr(socket_watch, "_read", spy)
    TcpQueueWatch(lambda: [os.getpid()], limit=16 << 20, foreign=[None])()
    assert opened == ["sockstat", "sockstat6"]


def test_tcp_sockets_counts_both_families_of_a_namespace() -> None:
    sockstat = "sockets: used 9\nTCP: inuse 3 orphan 1 tw 7 alloc 16 mem 161\nUDP: inuse 2 mem 0\n"
    assert tcp_sockets(sockstat + "TCP6: inuse 4\nUDP6: inuse 1\n") == 7
    assert tcp_sockets("TCP: inuse 0 orphan 0 tw 0 alloc 0 mem 0\nTCP6: inuse 0\n") == 0
