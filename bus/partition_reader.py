"""Reading one partition from an offset to its end, committed records only: the rewards tail and the changelog."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as LibKafkaError

from bus.clients import make_reader
from schemas.errors import KafkaError

#: (offset, key, value) of one record; value None is a tombstone.
Record = tuple[int, bytes | None, bytes | None]

#: What a topic says for a while after it was created or its leader moved: asked again, not an error.
SETTLING = frozenset({LibKafkaError.NOT_LEADER_FOR_PARTITION, LibKafkaError.LEADER_NOT_AVAILABLE,
                      LibKafkaError.UNKNOWN_TOPIC_OR_PART})  # fmt: skip


def read_to_end(
    client_config: Mapping[str, str], topic: str, partition: int, start: int, *, group: str, timeout_s: float
) -> tuple[list[Record], int]:
    """Every committed record of ``topic[partition]`` from ``start`` (or the log start) to the end, and the end.

    ``read_committed``: records of aborted transactions never show, and a transaction still open holds the
    end back until it commits or the broker aborts it.
    """
    consumer = make_reader(client_config, group)
    try:
        tp = TopicPartition(topic, partition)
        deadline = time.monotonic() + timeout_s
        low, high = settled_watermarks(consumer, tp, deadline)
        begin = max(start, low)
        if begin >= high:
            return [], max(high, start)
        consumer.assign([TopicPartition(topic, partition, begin)])
        found: list[Record] = []
        while True:
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is not None:
                    raise KafkaError(f"reading {topic}[{partition}] failed: {msg.error()}", topic=topic)
                offset = msg.offset()
                if offset is not None:
                    found.append((offset, msg.key(), msg.value()))
            position = consumer.position([tp])[0].offset
            if position >= high:
                return found, high
            if time.monotonic() > deadline:
                raise KafkaError(f"reading {topic}[{partition}] {begin}..{high} timed out at {position}", topic=topic)
    except KafkaException as exc:
        raise KafkaError(f"reading {topic}[{partition}] failed: {exc}", topic=topic) from exc
    finally:
        consumer.close()


def settled_watermarks(consumer: Consumer, tp: TopicPartition, deadline: float) -> tuple[int, int]:
    """``tp``'s (low, high) offsets. While its leader is still settling (a topic created a moment ago, a broker
    failing over) it is asked again until ``deadline``; then, or for any other error, the error raises."""
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=max(0.1, deadline - time.monotonic()), cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            settling = isinstance(error, LibKafkaError) and (error.code() in SETTLING or error.retriable())
            if not settling or time.monotonic() >= deadline:
                raise
        time.sleep(0.1)
