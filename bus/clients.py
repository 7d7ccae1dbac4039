"""Consumer/producer construction and dead-letter publishing shared by every worker.

Why here: every worker needs the same choices (manual commits, read_committed, idempotent producer, DLQ
messages that keep the original key), and getting one of them wrong silently loses or duplicates work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from bus.errors import from_exception, from_lib_error
from schemas.codec import encode
from schemas.events import DeadLetter


def consumer_config(
    client_config: Mapping[str, str], group_id: str, **overrides: str | int | bool
) -> dict[str, str | int | bool]:
    """A consumer that commits only what the caller says is done and never sees aborted transactions."""
    return {
        **client_config,
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        # Heartbeats run on librdkafka's own thread, so a short session timeout is safe and lets a crashed
        # worker's partitions move to a live one in ~10 s instead of the default 45 s.
        "session.timeout.ms": 10_000,
        "log_level": 3,
        **overrides,
    }


def producer_config(client_config: Mapping[str, str], **overrides: str | int | bool) -> dict[str, str | int | bool]:
    """An idempotent producer: broker retries never duplicate or reorder a partition's messages."""
    return {
        **client_config,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "log_level": 3,
        **overrides,
    }


def make_consumer(client_config: Mapping[str, str], group_id: str, **overrides: str | int | bool) -> Consumer:
    """A ``Consumer`` built from ``consumer_config``."""
    return Consumer(consumer_config(client_config, group_id, **overrides))


def make_producer(client_config: Mapping[str, str], **overrides: str | int | bool) -> Producer:
    """A ``Producer`` built from ``producer_config``."""
    return Producer(producer_config(client_config, **overrides))


@dataclass
class DeliveryTracker:
    """Collects delivery failures of asynchronous ``produce`` calls so a flush can raise them."""

    errors: list[Exception] = field(default_factory=list)

    def callback(self, err: object, msg: Message) -> None:
        """``on_delivery`` callback: remember the first failures (with the message's topic)."""
        if err is not None and len(self.errors) < 100:
            self.errors.append(from_lib_error("delivery failed", err, topic=msg.topic()))  # type: ignore[arg-type]

    def raise_first(self) -> None:
        """Raise (and forget) the first recorded failure, if any."""
        if self.errors:
            first, self.errors = self.errors[0], []
            raise first


def flush(producer: Producer, tracker: DeliveryTracker, timeout_s: float) -> None:
    """Wait until every queued message is delivered; raise if one failed or time ran out."""
    remaining = producer.flush(timeout_s)
    tracker.raise_first()
    if remaining:
        raise from_exception("flush", TimeoutError(f"{remaining} messages still undelivered after {timeout_s}s"))


def publish_dead_letter(
    producer: Producer,
    dlq_topic: str,
    msg: Message,
    *,
    component: str,
    error: BaseException,
    tracker: DeliveryTracker,
) -> DeadLetter:
    """Queue a DeadLetter for ``msg`` (same key, so it stays with its episode); the caller flushes."""
    letter = DeadLetter.capture(
        source_topic=msg.topic() or "?",
        source_partition=max(msg.partition() or 0, 0),
        source_offset=max(msg.offset() or 0, 0),
        component=component,
        error=error,
        key=msg.key(),
        value=msg.value() or b"",
    )
    try:
        producer.produce(dlq_topic, key=letter.key(), value=encode(letter), on_delivery=tracker.callback)
    except (BufferError, Exception) as exc:  # KafkaException, BufferError
        raise from_exception(
            "queue dead letter", exc, topic=msg.topic(), partition=msg.partition(), offset=msg.offset()
        ) from exc
    return letter


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
