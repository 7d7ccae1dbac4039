"""Kafka clients built from ``bus.config``, and the offsets to commit after a batch."""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from bus.config import consumer_config, producer_config, reader_config, transactional_config


def make_consumer(client_config: Mapping[str, str], group_id: str, **overrides: str | int | bool) -> Consumer:
    """A consumer-group member (``bus.config.consumer_config``)."""
    return Consumer(consumer_config(client_config, group_id, **overrides))


def make_reader(client_config: Mapping[str, str], group_id: str, **overrides: str | int | bool) -> Consumer:
    """A self-assigning read_committed reader (``bus.config.reader_config``)."""
    return Consumer(reader_config(client_config, group_id, **overrides))


def make_producer(client_config: Mapping[str, str], **overrides: str | int | bool) -> Producer:
    """An idempotent producer (``bus.config.producer_config``)."""
    return Producer(producer_config(client_config, **overrides))


def make_transactional_producer(
    client_config: Mapping[str, str], transactional_id: str, timeout_ms: int, **overrides: str | int | bool
) -> Producer:
    """A transactional producer (``bus.config.transactional_config``); call ``init_transactions`` before use."""
    return Producer(transactional_config(client_config, transactional_id, timeout_ms, **overrides))


def next_offsets(messages: list[Message]) -> list[TopicPartition]:
    """Offsets to commit after ``messages`` are done: highest offset + 1 per partition."""
    highest: dict[tuple[str, int], int] = {}
    for msg in messages:
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        if topic is None or partition is None or offset is None or offset < 0:
            continue
        key = (topic, partition)
        highest[key] = max(highest.get(key, -1), offset)
    return [TopicPartition(t, p, o + 1) for (t, p), o in sorted(highest.items())]


def consume_available(consumer: Consumer, max_messages: int, timeout_s: float) -> list[Message]:
    """Up to ``max_messages``: waits at most ``timeout_s`` for the first, then takes only what is already here.

    Why not ``consume(max_messages, timeout)``: it waits until ``max_messages`` arrived or the whole timeout
    passed, so a lone message (an agent's step, its observation) waited out the timeout every time."""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    if max_messages <= 1:
        return [first]
    return [first, *consumer.consume(num_messages=max_messages - 1, timeout=0)]
