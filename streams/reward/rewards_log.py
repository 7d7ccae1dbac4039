"""Reading a rewards partition's tail: the de-duplication source after a crash lost ``emitted`` markers."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import KafkaException, TopicPartition

from bus.clients import make_reader
from bus.partition_reader import read_to_end
from schemas.errors import KafkaError
from schemas.kafka_acls import PROBE_GROUP, SCAN_GROUP


def read_partition(
    client_config: Mapping[str, str], topic: str, partition: int, start: int, timeout_s: float = 60.0
) -> tuple[list[tuple[int, bytes]], int]:
    """``(offset, value)`` of every committed record in ``topic[partition]`` from ``start`` to the end."""
    records, end = read_to_end(client_config, topic, partition, start, group=SCAN_GROUP, timeout_s=timeout_s)
    return [(offset, value) for offset, _key, value in records if value is not None], end


def idle_partitions(
    client_config: Mapping[str, str],
    group_id: str,
    topics: list[str],
    partitions: set[int],
    *,
    processed: Mapping[tuple[str, int], int],
    timeout_s: float = 10.0,
) -> tuple[set[tuple[str, int]], dict[tuple[str, int], int]]:
    """The ``(topic, partition)`` of ``topics`` x ``partitions`` consumed to the end (committed or processed),
    and the end (high watermark) of each one.

    "The end" is the last committed record, not the high watermark: the workers write in transactions, so a
    partition whose producer stopped (a judge that died) ends with a commit marker (and maybe aborted
    records) that no consumer ever delivers. Those partitions are probed with a read_committed consumer.
    """
    # Only the group's committed offsets and the high watermarks are read here, and the high watermark must
    # include records of open transactions (read_committed would answer the last stable offset instead).
    consumer = make_reader(client_config, group_id, **{"isolation.level": "read_uncommitted"})
    try:
        idle: set[tuple[str, int]] = set()
        behind: dict[tuple[str, int], tuple[int, int]] = {}
        ends: dict[tuple[str, int], int] = {}
        wanted = [TopicPartition(t, p) for t in topics for p in partitions]
        for tp in consumer.committed(wanted, timeout=timeout_s):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=timeout_s, cached=False
            )
            ends[(tp.topic, tp.partition)] = high
            done = max(tp.offset, low, processed.get((tp.topic, tp.partition), -1) + 1)
            if done >= high:
                idle.add((tp.topic, tp.partition))
            else:
                behind[(tp.topic, tp.partition)] = (done, high)
        return idle | _only_markers_left(client_config, behind, timeout_s), ends
    except KafkaException as exc:
        raise KafkaError(f"reading consumer lag of {group_id} failed: {exc}") from exc
    finally:
        consumer.close()


#: Records a consumer may fetch past the processed offset before a partition counts as busy: a batch of
#: control markers and aborted records rarely exceeds this, real backlogs almost always do.
_PROBE_LIMIT = 1000


def _only_markers_left(
    client_config: Mapping[str, str], behind: Mapping[tuple[str, int], tuple[int, int]], timeout_s: float
) -> set[tuple[str, int]]:
    """Of ``behind`` ((topic, partition) -> (next offset to process, high watermark)), those where nothing a
    read_committed consumer would deliver lies between the two (only transaction markers or aborted records).
    A partition with an open transaction is not idle: its records may still commit."""
    probe = {tp: span for tp, span in behind.items() if span[1] - span[0] <= _PROBE_LIMIT}
    if not probe:
        return set()
    consumer = make_reader(client_config, PROBE_GROUP)
    try:
        consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _high) in probe.items()])
        undecided = dict(probe)
        idle: set[tuple[str, int]] = set()
        deadline = time.monotonic() + min(timeout_s, 3.0)
        while undecided and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error() is None:
                    undecided.pop((msg.topic() or "", msg.partition() or 0), None)  # a real record waits
            positions = consumer.position([TopicPartition(t, p) for t, p in undecided])
            for pos in positions:
                key = (pos.topic, pos.partition)
                if key in undecided and pos.offset >= undecided[key][1]:
                    idle.add(key)
                    del undecided[key]
        return idle
    finally:
        consumer.close()
