"""``bus.admin``'s errors: a cluster that did not answer is told apart from a request that is wrong, so that a
start can wait for the first (a node down, a controller moving) and stop at once on the second."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException

from bus.admin import _fail
from schemas.errors import KafkaError, KafkaUnavailableError


@pytest.mark.parametrize(
    "code",
    [LibKafkaError._TIMED_OUT, LibKafkaError._TRANSPORT, LibKafkaError.REQUEST_TIMED_OUT, LibKafkaError.NOT_CONTROLLER],
)
def test_a_cluster_that_did_not_answer_is_unavailable(code: int) -> None:
    error = _fail("describing topic configs", KafkaException(LibKafkaError(code, "Timed out waiting for controller")),
                  "127.0.0.1:9092")  # fmt: skip
    assert isinstance(error, KafkaUnavailableError)
    assert str(error).startswith("describing topic configs failed (Kafka at 127.0.0.1:9092): ")


def test_a_retriable_error_is_unavailable() -> None:
    cause = LibKafkaError(LibKafkaError.UNKNOWN_TOPIC_OR_PART, "not yet", retriable=True)
    assert isinstance(_fail("listing topics", KafkaException(cause), "k:9092"), KafkaUnavailableError)


@pytest.mark.parametrize("code", [LibKafkaError.TOPIC_AUTHORIZATION_FAILED, LibKafkaError.INVALID_CONFIG])
def test_a_refused_or_wrong_request_is_not(code: int) -> None:
    error = _fail("creating topic t", KafkaException(LibKafkaError(code, "no")), "k:9092")
    assert type(error) is KafkaError
    assert LibKafkaError(code).name() in str(error)
