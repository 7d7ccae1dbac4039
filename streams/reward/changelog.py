"""The join table's changelog: a compacted topic per app, one partition per input partition, restored on assignment.

Named like Faust's (``<app_id>-reward-join-changelog``) so both engines find the same state.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

from schemas.errors import KafkaError
from schemas.topics import TopicSpec

TABLE_NAME = "reward-join"


def changelog_name(app_id: str) -> str:
    """The changelog topic of an app's join table."""
    return f"{app_id}-{TABLE_NAME}-changelog"


def changelog_spec(app_id: str, like: TopicSpec) -> TopicSpec:
    """A compacted topic with the partitioning of the input topic ``like`` (co-partitioned by construction)."""
    return TopicSpec(
        role=like.role,
        name=changelog_name(app_id),
        partitions=like.partitions,
        replication_factor=like.replication_factor,
        retention_ms=-1,
        cleanup_policy="compact",
        model=like.model,
        joined=False,
        description="the reward processor's join table (generation_id -> join state); compacted",
    )


def restore_partition(
    client_config: Mapping[str, str], topic: str, partition: int, timeout_s: float = 120.0
) -> dict[str, bytes]:
    """The table partition as the committed changelog says (tombstones delete; aborted writes never show).

    Reads to the end with ``read_committed``: a transaction left open by a killed processor holds the end back
    until the broker aborts it (``transaction.timeout.ms``), which is why that timeout is short.
    """
    consumer = Consumer(
        {
            **client_config,
            "group.id": f"{topic}-restore",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "log_level": 3,
        }
    )
    table: dict[str, bytes] = {}
    try:
        tp = TopicPartition(topic, partition)
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
        if high <= low:
            return table
        consumer.assign([TopicPartition(topic, partition, low)])
        deadline = time.monotonic() + timeout_s
        while True:
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is not None:
                    raise KafkaError(f"restoring {topic}[{partition}] failed: {msg.error()}")
                key = (msg.key() or b"").decode()
                value = msg.value()
                if value is None:
                    table.pop(key, None)
                else:
                    table[key] = value
            position = consumer.position([tp])[0].offset
            if position >= high:
                return table
            if time.monotonic() > deadline:
                raise KafkaError(f"restoring {topic}[{partition}] {low}..{high} timed out at {position}")
    except KafkaException as exc:
        raise KafkaError(f"restoring {topic}[{partition}] failed: {exc}") from exc
    finally:
        consumer.close()
