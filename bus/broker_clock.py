"""The broker's clock, read from outside any input: the append time of a probe message.

Why: limits that run on event time (an episode's ``idle_timeout_s`` on ``rs.actions``, a ``LogAppendTime``
topic) need a clock that moves when no input comes, and that is the same clock the input carries: the
broker's. Each ``now_ms`` appends one empty message to a small ``LogAppendTime`` topic of its own and reads
the timestamp the broker gave it from the delivery report. Neither a trainer's clock nor the worker's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, Message

from bus.clients import make_producer
from schemas.errors import KafkaError as RsKafkaError
from schemas.topics import TopicSpec

_HOUR_MS = 60 * 60 * 1000


def clock_spec(name: str, like: TopicSpec) -> TopicSpec:
    """The probe topic: one partition, broker timestamps, an hour of retention (nobody reads it)."""
    return replace(like, name=name, partitions=1, retention_ms=_HOUR_MS, joined=False,
                   description="probes of the broker's clock (append times); nobody reads it",
                   extra_config={"message.timestamp.type": "LogAppendTime"})  # fmt: skip


class BrokerClock:
    """``now_ms()``: the broker's time, one probe each call (called about once a second per worker)."""

    def __init__(self, client_config: Mapping[str, str], topic: str, timeout_s: float = 10.0) -> None:
        self._producer = make_producer(client_config, **{"linger.ms": 0})
        self._topic = topic
        self._timeout_s = timeout_s

    def now_ms(self) -> int:
        found: list[tuple[KafkaError | None, int]] = []

        def delivered(err: KafkaError | None, msg: Message) -> None:
            kind, stamp = msg.timestamp()
            found.append((err, stamp if kind == TIMESTAMP_LOG_APPEND_TIME else -1))

        self._producer.produce(self._topic, value=b"", on_delivery=delivered)
        self._producer.flush(self._timeout_s)
        if not found:
            raise RsKafkaError(f"the broker's clock ({self._topic}) did not answer in {self._timeout_s}s")
        err, stamp = found[0]
        if err is not None or stamp < 0:
            raise RsKafkaError(f"the broker's clock ({self._topic}) gave no append time: {err}", topic=self._topic)
        return stamp

    def close(self) -> None:
        self._producer.flush(self._timeout_s)
