"""The log indexer against the real Kafka and OpenSearch: mapping, DLQ, idempotent re-delivery, and the
issue's must-show "OpenSearch stopped for 30 s mid-run: afterwards every log record is indexed exactly once".

The outage test kills the OpenSearch of an isolated second platform (ports 39xxx), never the shared one.
Figures are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import collections
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from opensearchpy import OpenSearch

from bus.clients import make_producer
from bus.metrics import WorkerMetrics
from schemas.codec import decode
from schemas.events import DeadLetter, LogRecord
from schemas.settings import Settings
from tests.integration.platform_env import IsolatedPlatform, isolated_platform
from workers.logs.indexer import IndexerConfig
from workers.logs.service import run_indexers
from workers.logs.shipper import LogShipper

pytestmark = pytest.mark.integration


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


@dataclass
class Pipeline:
    """Unique topics and index prefix for one test, plus the means to run indexers on them."""

    kafka: dict[str, str]
    logs_topic: str
    dlq_topic: str
    prefix: str

    def config(self, group: str, batch_size: int = 200) -> IndexerConfig:
        return IndexerConfig(
            logs_topic=self.logs_topic, dlq_topic=self.dlq_topic, group_id=group, index_prefix=self.prefix,
            batch_size=batch_size, backoff_initial_s=0.2, backoff_max_s=2.0,
        )  # fmt: skip

    def settings(self, opensearch_url: str) -> Settings:
        return Settings(
            kafka_bootstrap=self.kafka["bootstrap.servers"], opensearch_url=opensearch_url, opensearch_replicas=0
        )


@dataclass
class RunningIndexer:
    stop: threading.Event
    thread: threading.Thread
    metrics: WorkerMetrics
    errors: list[BaseException]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "indexer did not stop"
        assert not self.errors, self.errors


def start_indexer(pipeline: Pipeline, opensearch_url: str, group: str, concurrency: int = 1) -> RunningIndexer:
    stop, metrics, errors = threading.Event(), WorkerMetrics("indexer"), []

    def target() -> None:
        try:
            run_indexers(
                pipeline.settings(opensearch_url), stop, concurrency=concurrency, metrics=metrics,
                config=pipeline.config(group),
            )  # fmt: skip
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name="test-indexer", daemon=True)
    thread.start()
    return RunningIndexer(stop, thread, metrics, errors)


@pytest.fixture
def pipeline(kafka_config: dict[str, str], unique_name: str) -> Iterator[Pipeline]:
    admin = AdminClient({**kafka_config})
    logs, dlq = f"rs-test.{unique_name}.logs", f"rs-test.{unique_name}.dlq"
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=3, replication_factor=1) for t in (logs, dlq)]
    ).values():
        future.result(timeout=30)
    try:
        yield Pipeline(kafka_config, logs, dlq, unique_name)
    finally:
        for future in admin.delete_topics([logs, dlq]).values():
            future.result(timeout=30)


def drop_indices(client: OpenSearch, prefix: str) -> None:
    for name in client.indices.get(index=f"{prefix}-*", ignore_unavailable=True):
        client.indices.delete(index=name, ignore_unavailable=True)
    client.indices.delete_index_template(name=f"{prefix}-template", ignore=[404])


def indexed_ids(client: OpenSearch, prefix: str) -> list[str]:
    """Every document id under the prefix (with repeats, if a record were ever indexed twice)."""
    client.indices.refresh(index=f"{prefix}-*")
    ids: list[str] = []
    response = client.search(
        index=f"{prefix}-*", body={"query": {"match_all": {}}, "_source": False, "size": 5000}, scroll="1m"
    )
    scroll_id = response["_scroll_id"]
    try:
        while hits := response["hits"]["hits"]:
            ids += [hit["_id"] for hit in hits]
            response = client.scroll(scroll_id=scroll_id, scroll="1m")
    finally:
        client.clear_scroll(scroll_id=scroll_id)
    return ids


def count(client: OpenSearch, prefix: str) -> int:
    try:
        client.indices.refresh(index=f"{prefix}-*")
        return int(client.count(index=f"{prefix}-*")["count"])
    except Exception:  # down or not created yet
        return -1


def read_dead_letters(pipeline: Pipeline, expected: int, timeout: float) -> list[DeadLetter]:
    consumer = Consumer(
        {**pipeline.kafka, "group.id": f"{pipeline.prefix}-dlq-reader", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([pipeline.dlq_topic])
    letters: list[DeadLetter] = []
    deadline = time.monotonic() + timeout
    try:
        while len(letters) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                letters.append(decode(msg.value() or b"", DeadLetter))
        # Anything beyond the expected count would be a bug: look a little longer.
        extra_deadline = time.monotonic() + 2
        while time.monotonic() < extra_deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                letters.append(decode(msg.value() or b"", DeadLetter))
    finally:
        consumer.close()
    return letters


def test_index_mapping_dlq_and_redelivery_overwrites(
    pipeline: Pipeline, opensearch_client: OpenSearch, settings: Settings
) -> None:
    producer = make_producer(pipeline.kafka)
    shipper = LogShipper(producer, pipeline.logs_topic, "executor", worker="test-host:1")
    records = [
        shipper.log(
            "info" if i % 7 else "error",
            f"run {i} finished",
            generation_id=f"gen-{i}",
            episode_id=f"ep-{i % 40}",
            run_id="run-1",
            task_id="HumanEval/0",
            stdout=f"hello world {i}\n",
            stderr="",
            fields={"status": "ok", "wall_ms": 12.5 + i, "exit_code": 0},
        )
        for i in range(300)
    ]
    # Mapping conflict: fields.exit_code is numeric above; a string there is rejected by OpenSearch.
    conflicting = shipper.log("info", "bad field", episode_id="ep-1", fields={"exit_code": "not-a-number"})
    shipper.flush()
    raw = Producer(pipeline.kafka)
    raw.produce(pipeline.logs_topic, key=b"ep-2", value=b"\xff not json")
    raw.produce(pipeline.logs_topic, key=b"ep-3", value=b'{"schema_version": "1.0", "level": "loud"}')
    raw.flush(30)

    indexer = start_indexer(pipeline, settings.opensearch.url, group=f"{pipeline.prefix}-a")
    try:
        wait_for(lambda: count(opensearch_client, pipeline.prefix) == 300, 60, "300 indexed records")
        letters = read_dead_letters(pipeline, expected=3, timeout=30)
        wait_for(lambda: indexer.metrics.value("rewardstream_processed_total") == 300, 10, "processed metric")
    finally:
        indexer.close()
    try:
        ids = indexed_ids(opensearch_client, pipeline.prefix)
        assert sorted(ids) == sorted(r.event_id for r in records)
        assert conflicting.event_id not in ids

        assert len(letters) == 3, letters
        reasons = {letter.error_type: letter for letter in letters}
        assert set(reasons) == {"DecodeError", "RejectedRecordError"}
        rejected = [entry for entry in letters if entry.error_type == "RejectedRecordError"]
        assert len(rejected) == 1
        assert "mapper_parsing_exception" in rejected[0].error or "exit_code" in rejected[0].error
        assert all(letter.source_topic == pipeline.logs_topic for letter in letters)
        assert {letter.original_key() for letter in letters} == {b"ep-1", b"ep-2", b"ep-3"}
        assert any("level" in letter.error for letter in letters)

        # The template's mapping: keyword ids (exact term), full-text output and message, numbers, dates.
        index = f"{pipeline.prefix}-*"
        hit = opensearch_client.search(index=index, body={"query": {"term": {"generation_id": "gen-42"}}})
        assert hit["hits"]["total"]["value"] == 1
        text = opensearch_client.search(index=index, body={"query": {"match": {"fields.stdout": "world"}}})
        assert text["hits"]["total"]["value"] == 300
        slow = opensearch_client.count(index=index, body={"query": {"range": {"fields.wall_ms": {"gte": 300}}}})
        assert slow["count"] == 12  # wall_ms = 12.5 + i >= 300  <=>  i >= 288
        recent = opensearch_client.count(index=index, body={"query": {"range": {"created_at": {"gte": "now-1h"}}}})
        assert recent["count"] == 300

        # Re-delivery of everything (a new consumer group starts from the beginning): same documents, no new ones.
        again = start_indexer(pipeline, settings.opensearch.url, group=f"{pipeline.prefix}-b", concurrency=2)
        try:
            wait_for(lambda: again.metrics.value("rewardstream_processed_total") == 300, 60, "re-indexing")
        finally:
            again.close()
        assert sorted(indexed_ids(opensearch_client, pipeline.prefix)) == sorted(r.event_id for r in records)
        doc = opensearch_client.search(
            index=index, body={"query": {"term": {"generation_id": "gen-7"}}, "version": True}
        )
        assert doc["hits"]["hits"][0]["_version"] == 2
    finally:
        drop_indices(opensearch_client, pipeline.prefix)


@pytest.fixture
def isolated(tmp_path: Path, platform_health: dict[str, Any]) -> Iterator[IsolatedPlatform]:
    if not platform_health["docker"].healthy:
        if os.environ.get("CI"):
            pytest.fail("CI must not skip integration tests: docker is not available")
        pytest.skip("docker is not available; start it with `rewardstream up`")
    platform = isolated_platform(tmp_path, base_port=25000)  # below the ephemeral port range
    try:
        yield platform
    finally:
        platform.purge()


OUTAGE_S = 30.0
TOTAL_RECORDS = 3000


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_opensearch_down_30s_mid_run_every_record_indexed_exactly_once(
    pipeline: Pipeline, isolated: IsolatedPlatform
) -> None:
    up = isolated.cli("up")
    assert up.returncode == 0, up.stderr
    opensearch = isolated.cli("status", "--json").json()["services"]["opensearch"]
    url, os_pid = opensearch["endpoint"], opensearch["managed_pid"]
    client = OpenSearch(hosts=[url], timeout=10, max_retries=0)

    producer = make_producer(pipeline.kafka)
    shipper = LogShipper(producer, pipeline.logs_topic, "verifier", worker="test-host:2")
    sent: list[str] = []
    producing_done = threading.Event()

    def produce_steadily() -> None:  # ~50 records/s for ~60 s: before, during and after the outage
        try:
            for i in range(TOTAL_RECORDS):
                record = shipper.log("info", f"verdict {i}", generation_id=f"g-{i}", episode_id=f"e-{i % 97}",
                                     stdout=f"case {i} passed\n", fields={"passed": i % 5, "total": 5})  # fmt: skip
                sent.append(record.event_id)
                if i % 50 == 49:
                    shipper.flush()
                    time.sleep(1.0)
            shipper.flush()
        finally:
            producing_done.set()

    indexer = start_indexer(pipeline, url, group=f"{pipeline.prefix}-outage", concurrency=2)
    feeder = threading.Thread(target=produce_steadily, name="feeder", daemon=True)
    feeder.start()
    try:
        wait_for(lambda: count(client, pipeline.prefix) >= 500, 120, "indexing to be under way")
        before = count(client, pipeline.prefix)
        os.kill(os_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for(lambda: count(client, pipeline.prefix) == -1, 30, "OpenSearch to be down")
        retries_at_kill = indexer.metrics.value("rewardstream_retries_total", dependency="opensearch")
        while time.monotonic() - killed_at < OUTAGE_S:  # the outage itself: the indexer must survive it
            assert indexer.thread.is_alive(), indexer.errors
            time.sleep(0.5)
        retries_during = indexer.metrics.value("rewardstream_retries_total", dependency="opensearch") - retries_at_kill
        restart_started = time.monotonic()
        again = isolated.cli("up")
        assert again.returncode == 0, again.stderr
        back_at = time.monotonic()
        downtime = back_at - killed_at
        feeder.join(timeout=180)
        assert producing_done.is_set()
        wait_for(lambda: count(client, pipeline.prefix) >= len(sent), 180, "the backlog to be indexed")
        caught_up = time.monotonic() - back_at
        ids = indexed_ids(client, pipeline.prefix)
    finally:
        indexer.close()
        feeder.join(timeout=180)
    duplicates = [i for i, n in collections.Counter(ids).items() if n > 1]
    assert len(sent) == TOTAL_RECORDS
    assert not duplicates
    assert sorted(ids) == sorted(sent), "every record indexed, exactly once"
    assert retries_during > 0, "the indexer must have kept retrying while OpenSearch was down"
    assert read_dead_letters(pipeline, expected=0, timeout=2) == []
    print(
        f"\nindexed before kill: {before}; OpenSearch down {downtime:.1f}s (restart took "
        f"{back_at - restart_started:.1f}s); bulk retries while down: {retries_during:.0f}; backlog indexed "
        f"{caught_up:.1f}s after OpenSearch was back; {len(ids)} documents for {len(sent)} records, 0 duplicates"
    )
    client.close()


def test_logging_handler_ships_ids_fields_and_exceptions(kafka_config: dict[str, str], kafka_topic: str) -> None:
    import logging

    from workers.logs.shipper import ShippingHandler

    shipper = LogShipper(make_producer(kafka_config), kafka_topic, "executor", worker="h:9")
    logger = logging.getLogger(f"test.{kafka_topic}")
    logger.propagate = False
    handler = ShippingHandler(shipper)
    logger.addHandler(handler)
    try:
        logger.setLevel(logging.DEBUG)
        logger.debug("below the handler's level")
        logger.info("ran %s", "gen-1", extra={"generation_id": "gen-1", "episode_id": "ep-1", "wall_ms": 12.5})
        try:
            raise ValueError("sandbox went away")
        except ValueError:
            logger.exception("run failed", extra={"episode_id": "ep-1"})
        shipper.flush()
    finally:
        logger.removeHandler(handler)
    consumer = Consumer({**kafka_config, "group.id": kafka_topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([kafka_topic])
    got: list[LogRecord] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(decode(msg.value() or b"", LogRecord))
    finally:
        consumer.close()
    assert [r.message for r in got] == ["ran gen-1", "run failed"]
    info, error = got
    assert (info.level, info.generation_id, info.episode_id, info.fields) == (
        "info",
        "gen-1",
        "ep-1",
        {"wall_ms": 12.5},
    )
    assert info.logger == f"test.{kafka_topic}"
    assert error.level == "error"
    assert error.exc_text is not None
    assert "ValueError: sandbox went away" in error.exc_text
