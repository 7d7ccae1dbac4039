"""``rewardstream worker indexer`` as a real process: throughput, /metrics, retention, SIGTERM.

Figures are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from opensearchpy import OpenSearch

from bus.clients import make_producer
from schemas.settings import Settings
from tests.integration.prometheus_env import indexer_topics
from workers.logs.indices import LogIndices, index_name
from workers.logs.shipper import LogShipper

pytestmark = pytest.mark.integration

RECORDS = 20_000


@pytest.fixture
def topics(kafka_config: dict[str, str], unique_name: str) -> Iterator[str]:
    """A topic prefix with its own logs and dlq topics."""
    with indexer_topics(kafka_config, unique_name, partitions=3) as prefix:
        yield prefix


def _count(client: OpenSearch, prefix: str) -> int:
    try:
        client.indices.refresh(index=f"{prefix}-*")
        return int(client.count(index=f"{prefix}-*")["count"])
    except Exception:
        return -1


@pytest.mark.slow
def test_worker_indexer_process_throughput_metrics_and_sigterm(
    topics: str, kafka_config: dict[str, str], opensearch_client: OpenSearch, settings: Settings, unique_name: str
) -> None:
    index_prefix = unique_name
    shipper = LogShipper(make_producer(kafka_config), f"{topics}logs", "judge", worker="bench:1")
    for i in range(RECORDS):
        shipper.log(
            "info", f"scored {i}", generation_id=f"g{i}", episode_id=f"e{i % 500}", fields={"score": i / RECORDS}
        )
    shipper.flush()

    env = {
        **os.environ,
        "RS_TOPIC_PREFIX": topics,
        "RS_OPENSEARCH_INDEX_PREFIX": index_prefix,
        "RS_OPENSEARCH_REPLICAS": "0",
        "RS_INDEXER_BATCH_SIZE": "1000",
        "RS_METRICS_PORT": "0",
    }
    started = time.monotonic()
    said: list[str] = []
    reader: threading.Thread | None = None
    proc = subprocess.Popen(
        [sys.executable, "-m", "rewardstream", "worker", "indexer", "--concurrency", "2"],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"metrics on (http://\S+/metrics)", line)
        assert match, line
        # The rest of its stderr is read all along: a pipe left full would block the process's next log line
        # (a busy host's Kafka warnings), and with it the SIGTERM drain this test times.
        reader = threading.Thread(target=lambda: said.extend(proc.stderr or ()), daemon=True)
        reader.start()
        deadline = time.monotonic() + 120
        first_at: float | None = None
        while (indexed := _count(opensearch_client, index_prefix)) < RECORDS:
            if first_at is None and indexed > 0:
                first_at = time.monotonic()
            assert proc.poll() is None, "".join(said[-20:])
            assert time.monotonic() < deadline, f"indexed {_count(opensearch_client, index_prefix)} of {RECORDS}"
            time.sleep(0.2)
        done_at = time.monotonic()
        elapsed = done_at - started
        steady = RECORDS / max(done_at - (first_at or started), 1e-3)
        with urllib.request.urlopen(match.group(1), timeout=5) as response:  # noqa: S310 (loopback URL)
            metrics = response.read().decode()
        assert f'rewardstream_processed_total{{role="indexer"}} {float(RECORDS)}' in metrics
        assert "rewardstream_run_seconds_bucket" in metrics
        assert "rewardstream_consumer_lag" in metrics
        assert 'rewardstream_in_flight{role="indexer"} 0.0' in metrics

        stop_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=30) == 0, "".join(said[-20:])
        except subprocess.TimeoutExpired:
            pytest.fail(f"no exit 30 s after SIGTERM; its last stderr lines:\n{''.join(said[-20:])}")
        stop_s = time.monotonic() - stop_at
        print(
            f"\nindexer process (2 consumers, bulk 1000): {RECORDS} records in {elapsed:.1f}s including startup "
            f"= {RECORDS / elapsed:.0f} records/s; from the first indexed record on ~{steady:.0f} records/s; "
            f"SIGTERM to exit {stop_s:.1f}s"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if reader is not None:
            reader.join(timeout=10)  # the pipe's end: the process is gone
        if proc.stderr is not None:
            proc.stderr.close()
        for name in opensearch_client.indices.get(index=f"{index_prefix}-*", ignore_unavailable=True):
            opensearch_client.indices.delete(index=name, ignore_unavailable=True)
        opensearch_client.indices.delete_index_template(name=f"{index_prefix}-template", ignore=[404])


def test_retention_deletes_expired_daily_indices_without_ism(opensearch_client: OpenSearch, unique_name: str) -> None:
    indices = LogIndices(opensearch_client, unique_name, replicas=0, retention_days=7)
    indices.install()
    today = index_name(unique_name, datetime.now(UTC))
    old, other = f"{unique_name}-2020.01.01", f"{unique_name}-notes"
    try:
        assert not indices.ism_enabled, "the local OpenSearch has no index-management plugin"
        for name in (old, today, other):
            opensearch_client.indices.create(index=name)
        mapping = opensearch_client.indices.get_mapping(index=today)[today]["mappings"]
        assert mapping["properties"]["event_id"]["type"] == "keyword", "the template applies to daily indices"
        assert indices.delete_expired() == [old]
        assert not opensearch_client.indices.exists(index=old)
        assert opensearch_client.indices.exists(index=today)
        assert opensearch_client.indices.exists(index=other)
    finally:
        for name in (old, today, other):
            opensearch_client.indices.delete(index=name, ignore_unavailable=True)
        opensearch_client.indices.delete_index_template(name=indices.template_name, ignore=[404])


def test_size_cap_deletes_the_oldest_daily_indices_until_the_prefix_fits(
    opensearch_client: OpenSearch, unique_name: str
) -> None:
    """Four daily indices with documents; a cap between their totals deletes the oldest days, never today's,
    and the age rule still applies beside it (the sweep the indexer runs)."""
    now = datetime.now(UTC)
    days = [index_name(unique_name, now - timedelta(days=n)) for n in (3, 2, 1, 0)]
    ancient = f"{unique_name}-2020.01.01"
    names = [ancient, *days]
    try:
        for n, name in enumerate(names):
            opensearch_client.indices.create(index=name, body={"settings": {"number_of_replicas": 0}})
            body: list[dict[str, object]] = []
            for i in range(200 * (n + 1)):
                body += [{"index": {}}, {"message": f"line {i} " * 20}]
            opensearch_client.bulk(index=name, body=body, refresh=True)
            opensearch_client.indices.flush(index=name)
        probe = LogIndices(opensearch_client, unique_name, replicas=0, retention_days=3650)
        sizes = probe.store_sizes()
        assert set(sizes) == set(names)
        assert all(size > 0 for size in sizes.values()), sizes
        # Room for today, yesterday and half of the day before: that day and the older ones must go.
        cap = sizes[days[3]] + sizes[days[2]] + sizes[days[1]] // 2
        indices = LogIndices(opensearch_client, unique_name, replicas=0, retention_days=7, max_bytes=cap)
        assert indices.sweep() == [ancient, days[0], days[1]], "age first, then the oldest days over the cap"
        assert sorted(indices.store_sizes()) == sorted(days[2:])
        tiny = LogIndices(opensearch_client, unique_name, replicas=0, retention_days=7, max_bytes=1)
        assert tiny.sweep() == [days[2]], "even over the cap, today's index is kept"
        assert list(tiny.store_sizes()) == [days[3]]
        assert tiny.sweep() == [], "idempotent"
    finally:
        for name in names:
            opensearch_client.indices.delete(index=name, ignore_unavailable=True)


def _ids(client: OpenSearch, prefix: str) -> list[str]:
    client.indices.refresh(index=f"{prefix}-*")
    response = client.search(index=f"{prefix}-*", body={"_source": False, "size": 10_000}, scroll="1m")
    ids: list[str] = []
    try:
        while hits := response["hits"]["hits"]:
            ids += [hit["_id"] for hit in hits]
            response = client.scroll(scroll_id=response["_scroll_id"], scroll="1m")
    finally:
        client.clear_scroll(scroll_id=response["_scroll_id"])
    return ids


@pytest.mark.slow
def test_indexer_killed_mid_run_loses_and_duplicates_nothing(
    topics: str, kafka_config: dict[str, str], opensearch_client: OpenSearch, unique_name: str
) -> None:
    total = 12_000
    shipper = LogShipper(make_producer(kafka_config), f"{topics}logs", "executor", worker="kill:1")
    sent = [shipper.log("info", f"run {i}", episode_id=f"e{i % 300}").event_id for i in range(total)]
    shipper.flush()
    env = {
        **os.environ,
        "RS_TOPIC_PREFIX": topics,
        "RS_OPENSEARCH_INDEX_PREFIX": unique_name,
        "RS_OPENSEARCH_REPLICAS": "0",
        "RS_INDEXER_BATCH_SIZE": "200",
        "RS_METRICS_PORT": "0",
    }
    argv = [sys.executable, "-m", "rewardstream", "worker", "indexer"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        first = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
        procs.append(first)
        deadline = time.monotonic() + 120
        while _count(opensearch_client, unique_name) < total // 4:
            assert first.poll() is None
            assert time.monotonic() < deadline, "indexing did not start"
            time.sleep(0.05)
        first.kill()  # SIGKILL mid-run: its last bulk may be indexed but not committed
        first.wait(timeout=30)
        at_kill = _count(opensearch_client, unique_name)
        second = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
        procs.append(second)
        deadline = time.monotonic() + 120
        while _count(opensearch_client, unique_name) < total:
            assert second.poll() is None
            assert time.monotonic() < deadline, f"indexed {_count(opensearch_client, unique_name)} of {total}"
            time.sleep(0.2)
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0
        ids = _ids(opensearch_client, unique_name)
        assert len(ids) == total
        assert sorted(ids) == sorted(sent)
        print(f"\nindexer SIGKILLed at {at_kill}/{total} indexed; after restart {len(ids)} documents, 0 duplicates")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        for name in opensearch_client.indices.get(index=f"{unique_name}-*", ignore_unavailable=True):
            opensearch_client.indices.delete(index=name, ignore_unavailable=True)
        opensearch_client.indices.delete_index_template(name=f"{unique_name}-template", ignore=[404])
