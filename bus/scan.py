"""Bounded reads of a topic: offset ranges per partition, read_committed, stopping at ends fixed up front.

Why fixed ends: a replay or an explain reads what existed when it started; a live topic keeps growing and
an open-ended read would never finish.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from bus.clients import make_reader
from bus.partition_reader import settled_watermarks
from schemas.errors import KafkaError
from schemas.kafka_acls import REPLAY_SCAN_GROUP

#: A read fails when no partition made progress for this long (a stuck broker, not a big topic).
STALL_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Record:
    """One message, with where it was."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes


def scan_consumer(config: Mapping[str, str]) -> Consumer:
    return make_reader(config, REPLAY_SCAN_GROUP)


def partitions(config: Mapping[str, str], topic: str, timeout_s: float = 30.0) -> list[int]:
    """Partition ids of ``topic``; a missing topic is a one-line error."""
    consumer = scan_consumer(config)
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise KafkaError(f"topic {topic} does not exist on {config.get('bootstrap.servers', '?')}", topic=topic)
        return sorted(meta.partitions)
    except KafkaException as exc:
        raise KafkaError(f"listing partitions of {topic} failed: {exc}", topic=topic) from exc
    finally:
        consumer.close()


def watermarks(config: Mapping[str, str], topic: str, timeout_s: float = 30.0) -> dict[int, tuple[int, int]]:
    """partition -> (low, high) watermark offsets now. A partition whose leader is still settling (a topic
    just created, a broker failing over) is asked again until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    ids = partitions(config, topic, timeout_s)
    consumer = scan_consumer(config)
    try:
        return {p: settled_watermarks(consumer, TopicPartition(topic, p), deadline) for p in ids}
    except KafkaException as exc:
        raise KafkaError(f"reading watermarks of {topic} failed: {exc}", topic=topic) from exc
    finally:
        consumer.close()


def offsets_for_time(
    config: Mapping[str, str], topic: str, when_ms: int, ends: Mapping[int, int], timeout_s: float = 30.0
) -> dict[int, int]:
    """Per partition, the first offset whose timestamp is at or after ``when_ms`` (the end if there is none)."""
    consumer = scan_consumer(config)
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, p, when_ms) for p in sorted(ends)], timeout=timeout_s)
        return {tp.partition: ends[tp.partition] if tp.offset < 0 else tp.offset for tp in found}
    except KafkaException as exc:
        raise KafkaError(f"looking up offsets of {topic} at {when_ms} ms failed: {exc}", topic=topic) from exc
    finally:
        consumer.close()


def read_ranges(
    config: Mapping[str, str],
    topic: str,
    ranges: Mapping[int, tuple[int, int]],
    progress: Callable[[int], None] = lambda _n: None,
) -> Iterator[Record]:
    """Every committed record in ``ranges`` (partition -> [start, end)), partition by partition in offset order.

    ``progress`` gets the number of records read so far, now and then.
    """
    todo = {p: (a, b) for p, (a, b) in ranges.items() if b > a}
    if not todo:
        return
    consumer = scan_consumer(config)
    try:
        consumer.assign([TopicPartition(topic, p, a) for p, (a, _b) in sorted(todo.items())])
        done: set[int] = set()
        count = 0
        last_progress = time.monotonic()
        while len(done) < len(todo):
            batch = consumer.consume(1000, timeout=0.5)
            for msg in batch:
                if msg.error() is not None:
                    raise KafkaError(f"reading {topic} failed: {msg.error()}", topic=topic, partition=msg.partition())
                partition, offset = msg.partition(), msg.offset()
                if partition is None or offset is None or offset >= todo[partition][1]:
                    continue
                count += 1
                _ts_type, ts = msg.timestamp()
                yield Record(topic, partition, offset, ts, msg.key(), msg.value() or b"")
            if batch:
                last_progress = time.monotonic()
                progress(count)
            positions = consumer.position([TopicPartition(topic, p) for p in sorted(todo) if p not in done])
            for tp in positions:
                if tp.offset >= todo[tp.partition][1]:
                    done.add(tp.partition)
                    last_progress = time.monotonic()
            if time.monotonic() - last_progress > STALL_TIMEOUT_S:
                stuck = {tp.partition: tp.offset for tp in positions if tp.partition not in done}
                raise KafkaError(f"reading {topic} made no progress for {STALL_TIMEOUT_S:.0f}s at {stuck}", topic=topic)
        progress(count)
    except KafkaException as exc:
        raise KafkaError(f"reading {topic} failed: {exc}", topic=topic) from exc
    finally:
        consumer.close()
