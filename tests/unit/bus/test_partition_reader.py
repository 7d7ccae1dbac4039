"""``bus.partition_reader.settled_watermarks``: asked again while a partition's leader settles (a topic just
created), never for another error, and never past the deadline (the broker itself: the integration test)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException, TopicPartition

from bus.partition_reader import settled_watermarks

TP = TopicPartition("t", 0)


class Answers:
    """A consumer whose watermark answers are the given errors, then ``(low, high)``."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        assert (tp, cached) == (TP, False)
        assert timeout > 0
        self.calls += 1
        if self.errors:
            raise KafkaException(LibKafkaError(self.errors.pop(0)))
        return 3, 7


def test_a_settling_leader_is_asked_again_until_it_answers() -> None:
    consumer = Answers(
        LibKafkaError.NOT_LEADER_FOR_PARTITION, LibKafkaError.LEADER_NOT_AVAILABLE, LibKafkaError.UNKNOWN_TOPIC_OR_PART
    )
    assert settled_watermarks(consumer, TP, time.monotonic() + 10) == (3, 7)  # type: ignore[arg-type]
    assert consumer.calls == 4


@pytest.mark.parametrize("code", [LibKafkaError.TOPIC_AUTHORIZATION_FAILED, LibKafkaError.INVALID_REQUEST])
def test_any_other_error_raises_at_once(code: int) -> None:
    consumer = Answers(code)
    with pytest.raises(KafkaException):
        settled_watermarks(consumer, TP, time.monotonic() + 10)  # type: ignore[arg-type]
    assert consumer.calls == 1


def test_a_leader_that_never_comes_raises_at_the_deadline() -> None:
    consumer = Answers(*[LibKafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    started = time.monotonic()
    with pytest.raises(KafkaException, match="NOT_LEADER"):
        settled_watermarks(consumer, TP, started + 0.5)  # type: ignore[arg-type]
    assert 0.2 < time.monotonic() - started < 2.0
    assert 1 < consumer.calls < 20
