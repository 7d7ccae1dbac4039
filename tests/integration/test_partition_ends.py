"""Where partitions end, as the loops read it without waiting behind their own consumer's fetches: the
episode worker's timers (``bus.ends.EndOffsets``) and every worker's lag gauge (``WorkerMetrics.update_lag``),
against the real broker, and neither blocking a fetching consumer's loop."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from confluent_kafka import Consumer, TopicPartition

from bus.admin import delete_topics, ensure_topics
from bus.clients import consume_available, make_consumer
from bus.ends import EndOffsets
from bus.metrics import WorkerMetrics
from schemas.topics import catalog, topic_for
from tests.integration.workers_pipeline_env import publish

pytestmark = pytest.mark.integration

PARTITIONS = 3


@pytest.fixture
def topic(kafka_config: dict[str, str], unique_name: str) -> Iterator[str]:
    spec = replace(topic_for("dlq", catalog(f"rs-test.{unique_name}.", PARTITIONS, 1)), joined=False)
    ensure_topics([spec], kafka_config)
    try:
        yield spec.name
    finally:
        delete_topics([spec.name], kafka_config)


def read(consumer: Consumer, count: int, deadline: float) -> int:
    got = 0
    while got < count and time.monotonic() < deadline:
        got += len(consume_available(consumer, count - got, 0.5))
    return got


def test_ends_are_one_request_that_never_waits_behind_a_long_poll(
    kafka_config: dict[str, str], topic: str, unique_name: str
) -> None:
    placed = publish(kafka_config, topic, [(f"k{i}".encode(), b"x") for i in range(30)])
    written = {(topic, p): sum(1 for part, _ in placed if part == p) for p in range(PARTITIONS)}
    ends = EndOffsets(kafka_config)
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    assert ends.ends(partitions, 10) == written
    consumer = make_consumer(kafka_config, unique_name, **{"fetch.wait.max.ms": 500})
    consumer.subscribe([topic])
    try:
        assert read(consumer, 30, time.monotonic() + 60) == 30
        consumer.poll(0.2)  # caught up: the consumer's next fetch now waits on the broker for new records
        started = time.monotonic()
        for _ in range(10):
            assert ends.ends(partitions, 10) == written
        took = time.monotonic() - started
        assert took < 1.0, f"10 end lookups took {took:.2f}s: they waited behind the consumer's fetch"
    finally:
        consumer.close()


def test_the_lag_gauge_is_the_fetched_ends_minus_the_position_and_asks_no_broker(
    kafka_config: dict[str, str], topic: str, unique_name: str
) -> None:
    publish(kafka_config, topic, [(f"k{i}".encode(), b"x") for i in range(30)])
    consumer = make_consumer(kafka_config, unique_name, **{"fetch.wait.max.ms": 500})
    consumer.subscribe([topic])
    metrics = WorkerMetrics("executor")
    try:
        deadline = time.monotonic() + 60
        assert read(consumer, 10, deadline) == 10
        # 20 left unread, on whichever partitions; nothing is consumed from here on (the position stays), while
        # the client's fetcher keeps fetching in the background and so learns every partition's end.
        lag, took = -1.0, 0.0
        while time.monotonic() < deadline:
            started = time.monotonic()
            metrics.update_lag(consumer)
            took = max(took, time.monotonic() - started)
            lag = sum(
                metrics.value("rewardstream_consumer_lag", topic=topic, partition=str(p)) for p in range(PARTITIONS)
            )
            if lag == 20:
                break
            time.sleep(0.05)  # a fetch response still to land: look again, until the deadline
        assert lag == 20
        assert took < 0.1, f"a lag update took {took:.2f}s: it waited on the broker"
    finally:
        consumer.close()
