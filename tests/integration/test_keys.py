"""``bus.keys.partition_for`` against the real broker: every producer of ``bus.config`` (plain, the trainer
SDK's, transactional) puts a keyed record on the partition it computes, for any partition count."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bus.clients import make_producer, make_transactional_producer
from bus.keys import partition_for

pytestmark = [pytest.mark.integration]

KEYS = [f"ep-{i:04x}".encode() for i in range(300)] + [b"\xff\x00", "é".encode()]


@pytest.fixture
def seven_partitions(kafka_config: dict[str, str], unique_name: str) -> Iterator[str]:
    admin = AdminClient({**kafka_config})
    topic = f"rs-test.{unique_name}-7"
    admin.create_topics([NewTopic(topic, num_partitions=7, replication_factor=1)])[topic].result(timeout=30)
    try:
        yield topic
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)


def _landed(producer: Producer, topic: str, transactional: bool = False) -> dict[bytes, int]:
    landed: dict[bytes, int] = {}

    def delivered(err: object, msg: Message) -> None:
        assert err is None, err
        landed[msg.key() or b""] = msg.partition() or 0

    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    for key in KEYS:
        producer.produce(topic, key=key, value=b"x", on_delivery=delivered)
    if transactional:
        producer.commit_transaction(30)
    assert producer.flush(30) == 0
    return landed


def test_keyed_records_land_where_partition_for_says(
    kafka_config: dict[str, str], kafka_topic: str, seven_partitions: str, unique_name: str
) -> None:
    for topic, count in ((kafka_topic, 3), (seven_partitions, 7)):
        expected = {key: partition_for(key, count) for key in KEYS}
        assert len(set(expected.values())) == count  # the keys spread over every partition
        assert _landed(make_producer(kafka_config), topic) == expected, topic
        txn = make_transactional_producer(kafka_config, f"{unique_name}-{count}", 10_000)
        assert _landed(txn, topic, transactional=True) == expected, topic
