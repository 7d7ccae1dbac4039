"""The TCP socket watch's arithmetic on sockstat and /proc/net/tcp tables (the real enforcement is in
tests/sandbox)."""

from __future__ import annotations

import os

import pytest

from workers.sandbox import socket_watch
from workers.sandbox.api import SandboxStatus
from workers.sandbox.socket_watch import (
    SOCKET_FLOOR,
    SOCKET_WORST,
    SOCKETS_MAX,
    TcpQueueWatch,
    queue_limit,
    queued_bytes,
    sockets_max,
    tcp_sockets,
)

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def _row(state: str, tx: int, rx: int) -> str:
    return f"   0: 0100007F:9C4B 0100007F:D2A2 {state} {tx:08X}:{rx:08X} 00:00000000 00000000 60123 0 1 1\n"


def test_listeners_count_connections_not_bytes_and_are_left_out() -> None:
    assert queued_bytes(HEADER + _row("0A", 4096, 16)) == 0


def test_every_other_socket_counts_in_whole_pages() -> None:
    table = HEADER + _row("01", 0, 1) + _row("01", 5000, 0) + _row("04", 0, 0) + _row("01", 4096, 4096)
    assert queued_bytes(table) == 4096 + 8192 + 0 + 8192


def test_a_connecting_socket_counts_at_most_its_syn_and_one_segment() -> None:
    """Mid-connect the table shows the initial sequence number as tx_queue: never gigabytes of a run's."""
    isn_race = HEADER + _row("02", 0xD2A2F00D, 0)
    assert queued_bytes(isn_race) == 17 * 4096
    assert queued_bytes(HEADER + _row("02", 1, 0)) == 4096
    assert queued_bytes(HEADER + _row("01", 0xD2A2F00D, 0)) == -(-0xD2A2F00D // 4096) * 4096


def test_the_watch_stops_a_run_over_its_share_and_skips_foreign_namespaces() -> None:
    assert queue_limit(128 << 20) == 16 << 20
    mine = os.readlink("/proc/self/ns/net")
    watch = TcpQueueWatch(lambda: [os.getpid()], limit=0, foreign=[mine])
    assert watch() is None  # the worker's own namespace is never counted
    over = TcpQueueWatch(lambda: [os.getpid(), os.getpid()], limit=-1, foreign=[None])
    assert over() is SandboxStatus.MEMORY_LIMIT


def test_tcp_sockets_counts_both_families_of_a_namespace() -> None:
    sockstat = "sockets: used 9\nTCP: inuse 3 orphan 1 tw 7 alloc 16 mem 161\nUDP: inuse 2 mem 0\n"
    assert tcp_sockets(sockstat + "TCP6: inuse 4\nUDP6: inuse 1\n") == 7
    assert tcp_sockets("TCP: inuse 0 orphan 0 tw 0 alloc 0 mem 0\nTCP6: inuse 0\n") == 0


def test_the_socket_budget_follows_the_share_and_is_capped() -> None:
    assert sockets_max(16 << 20) == SOCKETS_MAX == 1024  # a 128 MiB run
    assert sockets_max(1 << 20) == (1 << 20) // SOCKET_FLOOR == 256  # an 8 MiB run
    assert sockets_max(64 << 20) == SOCKETS_MAX  # the cap keeps every table read small


def _fake_namespace(monkeypatch: pytest.MonkeyPatch, sockets: int, queued: int) -> list[int]:
    reads: list[int] = []
    monkeypatch.setattr(socket_watch, "netns_sockets", lambda pid: sockets)

    def tables(pid: int) -> int:
        reads.append(pid)
        return queued

    monkeypatch.setattr(socket_watch, "netns_queued_bytes", tables)
    return reads


def test_few_sockets_are_bounded_by_their_count_and_the_tables_stay_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    limit = 16 << 20
    reads = _fake_namespace(monkeypatch, limit // SOCKET_WORST, queued=1 << 40)
    watch = TcpQueueWatch(lambda: [os.getpid()], limit=limit, foreign=[None])
    assert watch() is None
    assert (reads, watch.tables_read) == ([], 0)


def test_more_sockets_are_counted_with_what_they_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    limit, sockets = 16 << 20, 1000
    reads = _fake_namespace(monkeypatch, sockets, queued=limit - sockets * SOCKET_FLOOR)
    watch = TcpQueueWatch(lambda: [os.getpid()], limit=limit, foreign=[None])
    assert watch() is None
    assert watch.tables_read == 1
    reads = _fake_namespace(monkeypatch, sockets, queued=limit - sockets * SOCKET_FLOOR + 1)
    assert watch() is SandboxStatus.MEMORY_LIMIT
    assert reads == [os.getpid()]


def test_too_many_sockets_end_the_run_without_reading_a_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost of a poll never grows with what a run holds: past ``sockets_max`` nothing more is read."""
    limit = 16 << 20
    reads = _fake_namespace(monkeypatch, sockets_max(limit) + 1, queued=0)
    watch = TcpQueueWatch(lambda: [os.getpid()], limit=limit, foreign=[None])
    assert watch() is SandboxStatus.MEMORY_LIMIT
    assert (reads, watch.tables_read) == ([], 0)
