"""What a worker uses to emit LogRecords to the ``logs`` topic (the indexer puts them into OpenSearch).

Why a producer and not a logging handler writing to OpenSearch directly: the worker must never block on,
or lose logs to, an OpenSearch outage. Kafka holds the records until the indexer catches up.
Sending is asynchronous; ``flush`` (or the worker's transaction commit) makes them durable.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

from confluent_kafka import Producer

from bus.delivery import DeliveryTracker, flush, produce
from schemas.caps import fit, fit_list
from schemas.codec import encode
from schemas.events import LOG_FIELD_CHARS, OUTPUT_TAIL_MAX_CHARS, LogLevel, LogRecord, LogValue

#: Characters of the host name in ``host:pid``: with the pid, within ``LogRecord.worker``'s cap.
_HOST_CHARS = 200


def worker_name() -> str:
    """``host:pid``, the ``worker`` field of every record this process emits."""
    return f"{socket.gethostname()[:_HOST_CHARS]}:{os.getpid()}"


def tail(text: str, limit: int = OUTPUT_TAIL_MAX_CHARS) -> tuple[str, bool]:
    """The last ``limit`` characters of ``text`` (where errors usually are) and whether it was cut."""
    if len(text) <= limit:
        return text, False
    return text[-limit:], True


class LogShipper:
    """Emits LogRecords of one component; keyed by episode so one episode's logs stay in order."""

    def __init__(self, producer: Producer, topic: str, component: str, worker: str | None = None) -> None:
        self._producer = producer
        self._topic = topic
        self.component = component
        self.worker = worker or worker_name()
        self._tracker = DeliveryTracker()

    def use(self, producer: Producer) -> None:
        """Emit through ``producer`` from now on: the worker's replacement of its failed transactional producer
        (the records are part of its transactions)."""
        self._producer = producer

    def emit(self, record: LogRecord) -> LogRecord:
        """Queue ``record`` for sending; its ``event_id`` is the document id in OpenSearch."""
        produce(self._producer, self._topic, key=record.key(), value=encode(record), on_delivery=self._tracker.callback)
        self._producer.poll(0)
        return record

    def log(
        self,
        level: LogLevel,
        message: str,
        *,
        fields: Mapping[str, LogValue] | None = None,
        stdout: str | None = None,
        stderr: str | None = None,
        exc_text: str | None = None,
        **context: str | int | None,
    ) -> LogRecord:
        """Build and emit a record (see ``record``)."""
        return self.emit(
            self.record(level, message, fields=fields, stdout=stdout, stderr=stderr, exc_text=exc_text, **context)
        )

    def record(
        self,
        level: LogLevel,
        message: str,
        *,
        fields: Mapping[str, LogValue] | None = None,
        stdout: str | None = None,
        stderr: str | None = None,
        exc_text: str | None = None,
        **context: str | int | None,
    ) -> LogRecord:
        """A record of this component; ``context`` sets ids (generation_id, episode_id, ...), ``fields`` extras.

        ``stdout``/``stderr`` are kept as their last OUTPUT_TAIL_MAX_CHARS characters (full output belongs in
        the artifact store) and indexed as full text; ``*_truncated`` says whether they were cut.
        """
        extra: dict[str, LogValue] = dict(fields or {})
        for name, text in (("stdout", stdout), ("stderr", stderr)):
            if text is not None:
                kept, cut = tail(text)
                extra[name] = kept
                extra[f"{name}_truncated"] = cut
        return LogRecord(
            level=level,
            component=self.component,
            worker=self.worker,
            message=fit(LogRecord, "message", message),
            fields=extra,
            exc_text=None if exc_text is None else fit(LogRecord, "exc_text", exc_text, keep="tail"),
            **context,  # type: ignore[arg-type]
        )

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued record is in Kafka; raise KafkaError if one could not be delivered."""
        flush(self._producer, self._tracker, timeout_s)


_LEVELS: dict[int, LogLevel] = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warning",
    logging.ERROR: "error",
    logging.CRITICAL: "critical",
}
#: ``extra={...}`` keys of a logging call that become LogRecord fields rather than ``fields`` entries.
CONTEXT_KEYS = ("generation_id", "episode_id", "run_id", "task_id", "topic", "partition", "offset")


class ShippingHandler(logging.Handler):
    """A ``logging`` handler that ships records through a LogShipper, so plain ``log.info(...)`` is indexed.

    Ids go in ``extra`` (``log.info("ran", extra={"generation_id": g})``); other ``extra`` values of JSON
    scalar types land in ``fields``. It never raises into the caller (logging's contract): failures go to
    ``handleError``.
    """

    def __init__(self, shipper: LogShipper, level: int = logging.INFO) -> None:
        super().__init__(level)
        self._shipper = shipper
        self._plain = set(vars(logging.makeLogRecord({})))

    def emit(self, record: logging.LogRecord) -> None:
        """Turn one ``logging.LogRecord`` into a rewardstream LogRecord and queue it."""
        try:
            extras = {k: v for k, v in vars(record).items() if k not in self._plain and k != "message"}
            context = {k: extras.pop(k) for k in CONTEXT_KEYS if k in extras}
            fields: dict[str, LogValue] = {
                k[:LOG_FIELD_CHARS]: v
                for k, v in extras.items()
                if isinstance(v, str | int | float | bool) or v is None
            }
            level = _LEVELS.get(record.levelno) or ("critical" if record.levelno > logging.ERROR else "debug")
            exc_text = self.formatter.formatException(record.exc_info) if self.formatter and record.exc_info else None
            if record.exc_info and exc_text is None:
                exc_text = logging.Formatter().formatException(record.exc_info)
            self._shipper.emit(
                LogRecord(
                    level=level,
                    component=self._shipper.component,
                    worker=self._shipper.worker,
                    logger=fit(LogRecord, "logger", record.name),
                    message=fit(LogRecord, "message", record.getMessage()),
                    fields=dict(fit_list(LogRecord, "fields", list(fields.items()))),
                    exc_text=None if exc_text is None else fit(LogRecord, "exc_text", exc_text, keep="tail"),
                    **context,
                )
            )
        except Exception:
            self.handleError(record)
