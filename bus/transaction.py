"""Kafka transactions that hold only consumer offsets: the crash guard's marks."""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

log = logging.getLogger(__name__)


def commit_offsets(producer: Producer, consumer: Consumer, offsets: list[TopicPartition], timeout_s: float) -> bool:
    """Commit ``offsets`` (with their metadata) in a transaction of their own; False if that failed.

    Best effort: a failed mark weakens the crash guard for one assignment and is logged; it never stops the
    consumer (a rebalance in progress makes this fail, and the next assignment writes a new mark).
    """
    if not offsets:
        return True
    try:
        producer.begin_transaction()
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), timeout_s)
        producer.commit_transaction(timeout_s)
    except KafkaException as exc:
        log.warning("committing offsets %s failed: %s", [(tp.topic, tp.partition, tp.offset) for tp in offsets], exc)
        try:
            producer.abort_transaction(timeout_s)
        except KafkaException as again:
            log.warning("aborting that transaction failed too: %s", again)
        return False
    return True
