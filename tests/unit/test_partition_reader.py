"""``bus.partition_reader``'s wait for a partition's leader: asked again while the broker says "no leader yet",
never for another error, and never past the deadline (the broker itself is in the integration test)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException, TopicPartition

from bus.partition_reader import watermarks

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


def test_no_leader_yet_is_asked_again_until_it_answers() -> None:
    consumer = Answers(LibKafkaError.NOT_LEADER_FOR_PARTITION, LibKafkaError.LEADER_NOT_AVAILABLE)
    assert watermarks(consumer, TP, time.monotonic() + 10) == (3, 7)  # type: ignore[arg-type]
    assert consumer.calls == 3


@pytest.mark.parametrize("code", [LibKafkaError.UNKNOWN_TOPIC_OR_PART, LibKafkaError.TOPIC_AUTHORIZATION_FAILED])
def test_any_other_error_raises_at_once(code: int) -> None:
    consumer = Answers(code)
    with pytest.raises(KafkaException):
        watermarks(consumer, TP, time.monotonic() + 10)  # type: ignore[arg-type]
    assert consumer.calls == 1


def test_a_leader_that_never_comes_raises_at_the_deadline() -> None:
    consumer = Answers(*[LibKafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    started = time.monotonic()
    with pytest.raises(KafkaException, match="NOT_LEADER"):
        watermarks(consumer, TP, started + 0.5)  # type: ignore[arg-type]
    assert 0.2 < time.monotonic() - started < 2.0
    assert 1 < consumer.calls < 20
