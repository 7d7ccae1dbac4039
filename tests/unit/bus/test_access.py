"""librdkafka's refusals said as one line naming what to fix, never the password."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from bus.access import AccessWatch, access_problem, scrub

CONFIG = {"bootstrap.servers": "127.0.0.1:9092", "sasl.username": "trainer", "sasl.password": "pw-123456"}


def test_a_refused_login_names_the_user_and_the_settings() -> None:
    error = KafkaError(
        KafkaError._AUTHENTICATION,
        "sasl_ssl://127.0.0.1:9092/bootstrap: SASL authentication error: Authentication failed during authentication "
        "due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 328ms in state AUTH_REQ)",
    )
    line = access_problem(error, CONFIG)
    assert line == (
        "Kafka refused the credentials of user trainer (RS_KAFKA_SASL_USERNAME/RS_KAFKA_SASL_PASSWORD): "
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
    )


def test_a_missing_acl_names_principal_operation_and_resource() -> None:
    error = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed")
    line = access_problem(error, CONFIG, operation="read", resource="rs.verdicts")
    assert line is not None
    assert line.startswith("principal User:trainer may not read topic rs.verdicts: add an ACL")
    group = KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    assert "may not read consumer group g1" in str(access_problem(group, CONFIG, operation="read", resource="g1"))


def test_other_errors_are_not_access_problems() -> None:
    assert access_problem(KafkaError(KafkaError._TRANSPORT, "down"), CONFIG) is None
    assert access_problem(None, CONFIG) is None


def test_a_tls_failure_points_at_the_ca_setting() -> None:
    error = KafkaError(KafkaError._AUTHENTICATION, "SSL handshake failed: certificate verify failed")
    assert "RS_KAFKA_SSL_CA_LOCATION" in str(access_problem(error, CONFIG))


def test_the_password_is_scrubbed() -> None:
    assert scrub("echo pw-123456 back", CONFIG) == "echo *** back"
    error = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: bad pw-123456")
    assert "pw-123456" not in str(access_problem(error, CONFIG))


def test_a_watch_says_a_refused_login_once_and_other_errors_at_its_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    watch = AccessWatch(CONFIG, logging.getLogger("test.access"), others=logging.DEBUG)
    refused = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed")
    for _ in range(5):
        watch.on_error(refused)
    watch.on_error(KafkaError(KafkaError._TRANSPORT, "broker down"))
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert watch.line is not None
    assert watch.line.startswith("Kafka refused the credentials of user trainer")
    assert [r.levelno for r in caplog.records if "broker down" in r.getMessage()] == [logging.DEBUG]
    denied = KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    assert "consumer group g" in str(watch.refused(denied, "read", "t", "g"))
    assert watch.refused(KafkaError(KafkaError._TRANSPORT, "x"), "read", "t") is None
