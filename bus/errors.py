"""Turn confluent-kafka errors into ``schemas.errors.KafkaError`` that say where (topic/partition/offset).

Modelled on quix-streams' ``kafka/exceptions.py``: callers catch one rewardstream type, SREs read which
message caused it, and whether retrying can help (``retriable``) comes from librdkafka itself.
"""

from __future__ import annotations

from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException, Message

from schemas.errors import KafkaError


class KafkaClientError(KafkaError):
    """A librdkafka error with its code name and whether librdkafka considers it retriable or fatal."""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retriable: bool = False,
        fatal: bool = False,
        txn_requires_abort: bool = False,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(message, topic=topic, partition=partition, offset=offset)
        self.code = code
        self.retriable = retriable
        self.fatal = fatal
        #: The open transaction failed but the producer is fine: abort it and re-run from committed offsets.
        self.txn_requires_abort = txn_requires_abort


def from_lib_error(
    what: str,
    error: LibKafkaError,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> KafkaClientError:
    """Wrap a ``confluent_kafka.KafkaError`` (as found in ``msg.error()`` or an exception's args)."""
    return KafkaClientError(
        f"{what}: {error.name()}: {error.str()}",
        code=error.name(),
        retriable=error.retriable(),
        fatal=error.fatal(),
        txn_requires_abort=error.txn_requires_abort(),
        topic=topic,
        partition=partition,
        offset=offset,
    )


def from_exception(
    what: str,
    exc: BaseException,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> KafkaClientError:
    """Wrap any exception raised by a confluent-kafka call; chain it with ``raise ... from exc``."""
    detail = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(detail, LibKafkaError):
        return from_lib_error(what, detail, topic=topic, partition=partition, offset=offset)
    return KafkaClientError(f"{what}: {type(exc).__name__}: {exc}", topic=topic, partition=partition, offset=offset)


def from_message(what: str, msg: Message) -> KafkaClientError:
    """Wrap the error a consumed message carries, with the message's coordinates."""
    offset = msg.offset()
    topic, partition = msg.topic(), msg.partition()
    known_offset = offset if offset is not None and offset >= 0 else None
    error = msg.error()
    if error is None:
        return KafkaClientError(
            f"{what}: message carries no error", topic=topic, partition=partition, offset=known_offset
        )
    return from_lib_error(what, error, topic=topic, partition=partition, offset=known_offset)
