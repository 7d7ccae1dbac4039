"""Worker metrics: one registry per worker, the expected series, and the HTTP endpoint."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from bus.metrics import MetricsError, WorkerMetrics, serve


def test_two_workers_in_one_process_do_not_share_a_registry() -> None:
    a, b = WorkerMetrics("executor"), WorkerMetrics("executor")
    a.processed(3)
    assert a.value("rewardstream_processed_total") == 3
    assert b.value("rewardstream_processed_total") == 0


def test_every_series_the_issue_asks_for_is_exposed() -> None:
    m = WorkerMetrics("verifier")
    m.processed()
    m.dead_letter("DecodeError")
    m.sandbox_error("host_contention")
    m.retry("s3")
    m.set_lag("rs.generations", 2, 17)
    with m.in_flight():
        assert m.value("rewardstream_in_flight") == 1
    assert m.value("rewardstream_in_flight") == 0
    assert m.value("rewardstream_run_seconds_count") == 1
    assert m.value("rewardstream_dead_letters_total", reason="DecodeError") == 1
    assert m.value("rewardstream_sandbox_errors_total", kind="host_contention") == 1
    assert m.value("rewardstream_sandbox_errors_total", kind="other") == 0
    assert m.value("rewardstream_retries_total", dependency="s3") == 1
    assert m.value("rewardstream_consumer_lag", topic="rs.generations", partition="2") == 17
    m.set_lag("rs.generations", 2, -5)
    assert m.value("rewardstream_consumer_lag", topic="rs.generations", partition="2") == 0


def test_what_the_host_did_to_runs_is_counted() -> None:
    m = WorkerMetrics("verifier")
    m.sandbox_run(2.5, 0)
    m.sandbox_run(0.0, 2)
    assert m.value("rewardstream_sandbox_wait_seconds_count") == 2
    assert m.value("rewardstream_sandbox_wait_seconds_sum") == pytest.approx(2.5)
    assert m.value("rewardstream_host_retries_total") == 2
    assert b"rewardstream_sandbox_wait_seconds_bucket" in m.exposition()


def test_endpoint_serves_the_registry_and_frees_its_port() -> None:
    m = WorkerMetrics("indexer")
    m.processed(2)
    server = serve(m, "127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
            text = response.read().decode()
        assert 'rewardstream_processed_total{role="indexer"} 2.0' in text
    finally:
        server.close()
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", server.port))


def test_taken_port_is_a_clear_error() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(MetricsError, match="RS_METRICS_PORT"):
            serve(WorkerMetrics("judge"), "127.0.0.1", port)


def test_rewards_are_counted_by_outcome_with_their_latency() -> None:
    m = WorkerMetrics("rewards")
    m.reward("complete", 1.5)
    m.reward("partial", 40.0)
    m.reward("gave_up", -1.0)
    assert m.value("rewardstream_rewards_total", outcome="complete") == 1
    assert m.value("rewardstream_rewards_total", outcome="partial") == 1
    assert m.value("rewardstream_reward_seconds_count") == 3
    assert m.value("rewardstream_reward_seconds_sum") == pytest.approx(41.5)


def test_counters_alerts_watch_are_born_at_zero_beside_process_and_host_series() -> None:
    """An alert on increase() sees a counter's first step only if the series existed before it (at 0)."""
    text = WorkerMetrics("executor").exposition().decode()
    for line in ('rewardstream_processed_total{role="executor"} 0.0',
                 'rewardstream_sandbox_errors_total{kind="host_contention",role="executor"} 0.0',
                 'rewardstream_sandbox_errors_total{kind="other",role="executor"} 0.0'):  # fmt: skip
        assert line in text
    for name in ("process_start_time_seconds", "rewardstream_host_memory_available_ratio",
                 "rewardstream_host_disk_free_ratio", "rewardstream_host_load_per_cpu"):  # fmt: skip
        assert f"\n{name}" in text
