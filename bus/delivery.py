"""Asynchronous produce, made safe: delivery failures collected and raised, a full local queue waited out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import Message, Producer

from bus.errors import KafkaClientError, from_exception, from_lib_error

#: How often ``produce`` serves delivery reports and tries again while the producer's local queue is full.
QUEUE_FULL_ATTEMPTS = 100
#: A message purged on purpose: by an aborted transaction (it is produced again when its input is re-run) or by
#: purging a discarded producer. Its report comes with a later poll, inside the next transaction: counting it
#: as a failure of that one ended a worker that had recovered.
PURGED = frozenset({LibKafkaError._PURGE_QUEUE, LibKafkaError._PURGE_INFLIGHT})


@dataclass
class DeliveryTracker:
    """Collects delivery failures of asynchronous ``produce`` calls so a flush can raise them."""

    errors: list[Exception] = field(default_factory=list)

    def callback(self, err: object, msg: Message) -> None:
        """``on_delivery`` callback: remember the first failures (with the message's topic), not a purge."""
        if err is not None and len(self.errors) < 100 and getattr(err, "code", lambda: None)() not in PURGED:
            self.errors.append(from_lib_error("delivery failed", err, topic=msg.topic()))  # type: ignore[arg-type]

    def raise_first(self) -> None:
        """Raise (and forget) the first recorded failure, if any."""
        if self.errors:
            first, self.errors = self.errors[0], []
            raise first


def produce(
    producer: Producer,
    topic: str,
    *,
    key: bytes | None,
    value: bytes | None,
    on_delivery: Callable[[Any, Message], None],
    partition: int = -1,
    timestamp_ms: int = 0,
) -> None:
    """Queue one message; while the local queue is full, serve delivery reports and retry (then raise)."""
    for attempt in range(QUEUE_FULL_ATTEMPTS):
        try:
            producer.produce(
                topic, key=key, value=value, partition=partition, timestamp=timestamp_ms, on_delivery=on_delivery
            )
            return
        except BufferError:
            producer.poll(0.1 if attempt else 0.0)
        except Exception as exc:  # KafkaException: e.g. a message over the size cap
            raise from_exception("produce", exc, topic=topic) from exc
    raise KafkaClientError("the producer's local queue stayed full", topic=topic)


def flush(producer: Producer, tracker: DeliveryTracker, timeout_s: float) -> None:
    """Wait until every queued message is delivered; raise if one failed or time ran out."""
    remaining = producer.flush(timeout_s)
    tracker.raise_first()
    if remaining:
        raise from_exception("flush", TimeoutError(f"{remaining} messages still undelivered after {timeout_s}s"))
