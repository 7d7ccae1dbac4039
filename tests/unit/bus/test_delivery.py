"""Delivery reports: a failure is kept for the flush to raise; a message purged on purpose is not a failure."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError as LibKafkaError

from bus.delivery import DeliveryTracker


def _msg() -> Any:
    return SimpleNamespace(topic=lambda: "out")


def test_a_purged_message_of_an_aborted_transaction_is_no_delivery_failure() -> None:
    """An aborted transaction's reports come with a later poll, inside the next transaction: raising them then
    ended a worker that had just recovered from a broker fault."""
    tracker = DeliveryTracker()
    tracker.callback(LibKafkaError(LibKafkaError._PURGE_QUEUE), _msg())
    tracker.callback(LibKafkaError(LibKafkaError._PURGE_INFLIGHT), _msg())
    tracker.callback(None, _msg())
    tracker.raise_first()  # nothing to raise
    tracker.callback(LibKafkaError(LibKafkaError.MSG_SIZE_TOO_LARGE), _msg())
    assert [type(e).__name__ for e in tracker.errors] == ["KafkaClientError"]
