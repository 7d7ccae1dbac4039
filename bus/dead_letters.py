"""Dead-lettering a consumed message: the reason and the message, to the DLQ topic, same key."""

from __future__ import annotations

from confluent_kafka import Message, Producer

from bus.delivery import DeliveryTracker, produce
from schemas.codec import encode
from schemas.events import DeadLetter


def publish_dead_letter(
    producer: Producer,
    dlq_topic: str,
    msg: Message,
    *,
    component: str,
    error: BaseException,
    tracker: DeliveryTracker,
) -> DeadLetter:
    """Queue a DeadLetter for ``msg`` (same key, so it stays with its episode); the caller flushes or commits."""
    letter = DeadLetter.capture(
        source_topic=msg.topic() or "?",
        source_partition=max(msg.partition() or 0, 0),
        source_offset=max(msg.offset() or 0, 0),
        component=component,
        error=error,
        key=msg.key(),
        value=msg.value() or b"",
    )
    produce(producer, dlq_topic, key=letter.key(), value=encode(letter), on_delivery=tracker.callback)
    return letter
