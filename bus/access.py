"""A refused credential or a missing ACL as one line that says what to fix.

Why: librdkafka says ``SASL authentication error: Authentication failed during authentication due to invalid
credentials with SASL mechanism SCRAM-SHA-512`` (once per retry, forever) or ``Broker: Topic authorization
failed``; neither names the user, the setting to change or the ACL to add, and a client waiting on either just
times out. These lines name the principal, the resource, the operation and the settings; never a password
(the config's ``sasl.password`` is only ever used to scrub text that might carry it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException

from schemas.errors import KafkaError

#: Where the ACL table and how to add a row are written.
ACL_DOCS = "docs/operations.md#kafka-authentication"
_CREDENTIALS = "RS_KAFKA_SASL_USERNAME/RS_KAFKA_SASL_PASSWORD"
_ACL = {
    "TOPIC_AUTHORIZATION_FAILED": "topic",
    "GROUP_AUTHORIZATION_FAILED": "consumer group",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": "transactional id",
    "CLUSTER_AUTHORIZATION_FAILED": "cluster",
}


class KafkaAccessError(KafkaError):
    """Kafka refused this client's credentials or an operation its principal has no ACL for: retrying cannot
    help, the settings or the cluster's ACLs must change."""


def principal_of(client_config: Mapping[str, object]) -> str:
    """``User:<name>`` of a config's SASL user (``User:ANONYMOUS`` without one, as Kafka calls it)."""
    return f"User:{client_config.get('sasl.username') or 'ANONYMOUS'}"


def access_problem(
    error: LibKafkaError | None,
    client_config: Mapping[str, object],
    *,
    operation: str = "use",
    resource: str | None = None,
) -> str | None:
    """The one line for ``error`` if it is a refused credential, a TLS handshake or a missing ACL, else None.
    ``operation`` (read, write, ...) and ``resource`` (the topic, group or transactional id) are what the
    caller was doing."""
    if error is None:
        return None
    return access_line(error.name(), error.str(), client_config, operation=operation, resource=resource)


def access_line(
    code: str | None,
    text: str,
    client_config: Mapping[str, object],
    *,
    operation: str = "use",
    resource: str | None = None,
) -> str | None:
    """``access_problem`` of an error known by its code name and text (a ``KafkaClientError``'s ``code``)."""
    text = scrub(text, client_config)
    if code == "_AUTHENTICATION" or "SASL authentication error" in text:
        if "SSL handshake failed" in text or "certificate verify failed" in text:
            return (
                f"the TLS handshake with Kafka at {client_config.get('bootstrap.servers')} failed: is "
                f"RS_KAFKA_SSL_CA_LOCATION ({client_config.get('ssl.ca.location') or 'unset: the system CAs'}) the "
                f"CA that signed the brokers' certificates? ({text})"
            )
        user = client_config.get("sasl.username") or "(none)"
        return f"Kafka refused the credentials of user {user} ({_CREDENTIALS}): {_mechanism(text)}"
    kind = _ACL.get(code or "")
    if kind is None:
        return None
    named = f"{kind} {resource}" if resource and kind != "cluster" else kind
    return (
        f"principal {principal_of(client_config)} may not {operation} {named}: add an ACL allowing it "
        f"(the table in {ACL_DOCS}) or use the credentials of a principal that may"
    )


def access_error(
    error: LibKafkaError | None,
    client_config: Mapping[str, object],
    *,
    operation: str = "use",
    resource: str | None = None,
) -> KafkaAccessError | None:
    """``access_problem`` as an exception to raise, or None."""
    line = access_problem(error, client_config, operation=operation, resource=resource)
    return None if line is None else KafkaAccessError(line)


def is_denied(code: str | None) -> bool:
    """Whether ``code`` (a librdkafka error name) is a missing ACL."""
    return code in _ACL


def scrub(text: str, client_config: Mapping[str, object]) -> str:
    """``text`` with the config's password replaced, whatever echoed it."""
    password = client_config.get("sasl.password")
    return text.replace(password, "***") if isinstance(password, str) and password else text


def _mechanism(text: str) -> str:
    """What the broker said of the mechanism, without librdkafka's connection prefix and timing."""
    said = text.split("SASL authentication error: ", 1)[-1]
    return said.split(" (after ", 1)[0]


class AccessWatch:
    """One client's refusals: its ``error_cb`` (a refused login, retried by librdkafka forever, said once) and
    the line of any error a call or a delivery report carries."""

    def __init__(self, client_config: Mapping[str, object], log: logging.Logger, others: int = logging.WARNING) -> None:
        self.client_config = client_config
        self.log = log
        #: The level other client errors are logged at (a worker's transient ones are its metrics' business).
        self.others = others
        #: The refused login (or TLS handshake), once one was reported.
        self.line: str | None = None
        self._said = threading.Lock()  # clients of one worker report from their own threads

    def on_error(self, err: object) -> None:
        """librdkafka's ``error_cb``: a refusal logged once as its line, anything else as it comes."""
        line = access_problem(err, self.client_config) if isinstance(err, LibKafkaError) else None
        if line is None:
            self.log.log(self.others, "kafka: %s", err)
            return
        with self._said:
            new = line != self.line
            self.line = line
        if new:
            self.log.error("kafka: %s", line)

    def refused(self, cause: object, operation: str, topic: str, group: str | None = None) -> str | None:
        """The line of ``cause`` (a ``KafkaException``, a librdkafka error or None) if it is a refusal of
        ``operation`` on ``topic`` (or on ``group``, the error says which), else None."""
        error = cause.args[0] if isinstance(cause, KafkaException) and cause.args else cause
        if not isinstance(error, LibKafkaError):
            return None
        resource = group if group is not None and error.name() == "GROUP_AUTHORIZATION_FAILED" else topic
        return access_problem(error, self.client_config, operation=operation, resource=resource)
