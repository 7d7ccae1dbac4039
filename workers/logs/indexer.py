"""``logs`` topic -> OpenSearch: bulk-index LogRecords so that each record is indexed exactly once.

How "exactly once" holds without transactions on the OpenSearch side:
- the document id is the record's ``event_id`` and the index is derived from its ``created_at``
  (``indices.index_name``), so a re-delivered record overwrites its own document instead of adding one;
- Kafka offsets are committed only after the bulk request (and any dead letters) succeeded, so a crash or
  an outage re-delivers, never skips.
While OpenSearch is down the indexer retries the same batch with capped exponential backoff, forever: it
pauses its partitions and keeps polling so the consumer group does not evict it. Undecodable records and
records OpenSearch rejects for their content (mapping errors) go to ``dlq`` with the reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka import KafkaError as LibKafkaError

from bus.clients import next_offsets
from bus.crash_guard import DEFAULT_ATTEMPTS, AloneGate, CrashGuard, GiveUp, release_marks, start_marks
from bus.dead_letters import publish_dead_letter
from bus.delivery import DeliveryTracker, flush
from bus.errors import from_message
from bus.metrics import WorkerMetrics
from schemas.codec import DecodeError, decode
from schemas.errors import HandlerCrashError, RewardstreamError, exception_line
from schemas.events import LogRecord
from schemas.settings import OpenSearchSettings, defaults
from workers.logs.indices import LogIndices, index_name

log = logging.getLogger(__name__)

#: Per-item bulk statuses that mean "try again later" rather than "this document is bad".
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class RejectedRecordError(RewardstreamError):
    """OpenSearch refused a record for its content (e.g. a mapping conflict); it goes to the DLQ."""


@dataclass(frozen=True)
class IndexerConfig:
    """Knobs of one indexer consumer; built from Settings by the CLI."""

    logs_topic: str
    dlq_topic: str
    group_id: str
    index_prefix: str
    batch_size: int = defaults(OpenSearchSettings).indexer_batch_size
    poll_timeout_s: float = 0.5
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 10.0
    retention_every_s: float = 3600.0
    lag_every_s: float = 5.0
    flush_timeout_s: float = 30.0
    component: str = "indexer"


@dataclass(frozen=True)
class BulkOutcome:
    """What one bulk attempt did: ids indexed, items to retry, items rejected for good (with reason)."""

    indexed: int
    retry: list[int]
    rejected: dict[int, str]


def document(record: LogRecord, msg: Message | None) -> dict[str, Any]:
    """The OpenSearch document for a record: its JSON form plus where it was read from."""
    doc: dict[str, Any] = record.model_dump(mode="json")
    doc["indexed_at"] = datetime.now(UTC).isoformat()
    if msg is not None:
        doc["source"] = {"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset()}
    return doc


def bulk_body(prefix: str, docs: Sequence[tuple[LogRecord, dict[str, Any]]]) -> list[dict[str, Any]]:
    """NDJSON bulk lines: an ``index`` action with the stable id, then the document, per record."""
    body: list[dict[str, Any]] = []
    for record, doc in docs:
        body.append({"index": {"_index": index_name(prefix, record.created_at), "_id": record.event_id}})
        body.append(doc)
    return body


def bulk_outcome(response: dict[str, Any]) -> BulkOutcome:
    """Sort a bulk response's items into indexed, to retry, and rejected (by position)."""
    indexed, retry, rejected = 0, [], {}
    for i, item in enumerate(response.get("items", [])):
        result = next(iter(item.values()))
        status = int(result.get("status", 500))
        if 200 <= status < 300:
            indexed += 1
        elif status in RETRY_STATUSES:
            retry.append(i)
        else:
            error = result.get("error") or {}
            rejected[i] = f"OpenSearch rejected the record ({status} {error.get('type')}): {error.get('reason')}"
    return BulkOutcome(indexed, retry, rejected)


class Backoff:
    """Capped exponential backoff with a reset once things work again."""

    def __init__(self, initial_s: float, max_s: float) -> None:
        self._initial = initial_s
        self._max = max_s
        self._next = initial_s

    def next_delay(self) -> float:
        """The delay to wait now; doubles each call up to the cap."""
        delay, self._next = self._next, min(self._next * 2, self._max)
        return delay

    def reset(self) -> None:
        """Start from the initial delay again."""
        self._next = self._initial


class LogIndexer:
    """One consumer of the ``logs`` topic in the indexer's consumer group."""

    def __init__(
        self,
        config: IndexerConfig,
        *,
        consumer: Consumer,
        producer: Producer,
        client: Any,
        indices: LogIndices,
        metrics: WorkerMetrics,
        stop: threading.Event,
        gate: AloneGate | None = None,
        crash_attempts: int = DEFAULT_ATTEMPTS,
    ) -> None:
        self.config = config
        self._consumer = consumer
        self._producer = producer
        self._client = client
        self._indices = indices
        self._metrics = metrics
        self._stop = stop
        self._tracker = DeliveryTracker()
        self._stash: list[Message] = []
        self._backoff = Backoff(config.backoff_initial_s, config.backoff_max_s)
        self._next_retention = 0.0
        self._next_lag = 0.0
        self._guard = CrashGuard(config.component, attempts=crash_attempts, window=config.batch_size)
        self._gate = gate or AloneGate()
        self._closing = False

    def run(self) -> None:
        """Consume and index until ``stop`` is set; uncommitted work is simply re-delivered later."""
        self._consumer.subscribe(
            [self.config.logs_topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        try:
            while not self._stop.is_set():
                batch = self._next_batch()
                if batch:
                    self._handle_guarded(batch)
                self._housekeeping()
        finally:
            # Release the partitions' marks here: a synchronous commit from the revoke callback that close()
            # runs can hang librdkafka's close.
            try:
                self._commit_offsets(release_marks(self._guard, self._consumer.assignment()))
            except KafkaException as exc:
                log.warning("releasing the crash guard's marks failed: %s", exception_line(exc))
            self._closing = True
            self._consumer.close()

    def _handle_guarded(self, batch: list[Message]) -> None:
        """Batches beside the process's other indexers; a suspect message (an owner died) alone, after a mark."""
        normal: list[Message] = []
        for msg in batch:
            if self._guard.suspect(msg.topic() or "", msg.partition() or 0, msg.offset() or 0):
                if normal:
                    with self._gate.together():
                        self.handle_batch(normal)
                    normal = []
                self._handle_alone(msg)
            else:
                normal.append(msg)
        if normal:
            with self._gate.together():
                self.handle_batch(normal)

    def _handle_alone(self, msg: Message) -> None:
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        decision = self._guard.before_alone(topic, partition, offset)
        if isinstance(decision, GiveUp):
            log.error("crash loop: %s", decision.error)
            self._dead_letter(msg, decision.error)
            if self._retry(lambda: flush(self._producer, self._tracker, self.config.flush_timeout_s), "kafka"):
                self._commit([msg])
            return
        self._commit_offsets([TopicPartition(topic, partition, offset, metadata=decision.mark.encode())])
        with self._gate.alone():
            self.handle_batch([msg])

    def _next_batch(self) -> list[Message]:
        want = self.config.batch_size
        batch, self._stash = self._stash[:want], self._stash[want:]
        if len(batch) < want:
            batch += self._consumer.consume(want - len(batch), self.config.poll_timeout_s)
        good: list[Message] = []
        for msg in batch:
            error = msg.error()
            if error is None:
                good.append(msg)
            elif error.code() != LibKafkaError._PARTITION_EOF:
                wrapped = from_message("consume", msg)
                if error.fatal():
                    raise wrapped
                log.warning("%s", wrapped)
        return good

    def handle_batch(self, messages: list[Message]) -> None:
        """Index a batch, dead-letter what cannot be indexed, then commit; retry while anything is down."""
        docs: list[tuple[LogRecord, dict[str, Any]]] = []
        sources: list[Message] = []
        for msg in messages:
            try:
                record = decode(msg.value() or b"", LogRecord)
                doc = document(record, msg)
            except DecodeError as exc:
                self._dead_letter(msg, exc)
                continue
            except Exception as exc:  # one message's failure is that message's, never the indexer's
                log.exception(
                    "handling %s[%s]@%s failed; dead-lettering it", msg.topic(), msg.partition(), msg.offset()
                )
                self._dead_letter(msg, HandlerCrashError(f"handler crashed: {type(exc).__name__}: {exc}"))
                continue
            docs.append((record, doc))
            sources.append(msg)
        if not self._index(docs, sources):
            return  # stopping: nothing committed, all of it is re-delivered to whoever takes over
        if not self._retry(lambda: flush(self._producer, self._tracker, self.config.flush_timeout_s), "kafka"):
            return
        self._commit(messages)

    def _dead_letter(self, msg: Message, exc: BaseException) -> None:
        publish_dead_letter(
            self._producer, self.config.dlq_topic, msg, component=self.config.component, error=exc,
            tracker=self._tracker,
        )  # fmt: skip
        self._metrics.dead_letter(type(exc).__name__)
        log.warning("dead-lettered %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), exc)

    def _index(self, docs: list[tuple[LogRecord, dict[str, Any]]], sources: list[Message]) -> bool:
        """Bulk-index until every doc is indexed or rejected; False if asked to stop first."""
        pending = list(range(len(docs)))
        while pending:
            if self._stop.is_set():
                return False
            body = bulk_body(self.config.index_prefix, [docs[i] for i in pending])
            try:
                with self._metrics.in_flight():
                    response = self._client.bulk(body=body)
            except Exception as exc:  # connection refused, timeouts, 429/5xx on the whole request
                log.warning("OpenSearch bulk of %d records failed, will retry: %s", len(pending), exception_line(exc))
                self._pause_for(self._backoff.next_delay(), "opensearch")
                continue
            outcome = bulk_outcome(response)
            self._metrics.processed(outcome.indexed)
            for position, reason in outcome.rejected.items():
                i = pending[position]
                self._dead_letter(sources[i], RejectedRecordError(reason))
            pending = [pending[p] for p in outcome.retry]
            if pending:
                log.warning("OpenSearch asked to retry %d of the bulk's records", len(pending))
                self._pause_for(self._backoff.next_delay(), "opensearch")
        self._backoff.reset()
        return True

    def _retry(self, action: Callable[[], None], dependency: str) -> bool:
        while not self._stop.is_set():
            try:
                action()
            except RewardstreamError as exc:
                log.warning("%s failed, will retry: %s", dependency, exc)
                self._pause_for(self._backoff.next_delay(), dependency)
                continue
            self._backoff.reset()
            return True
        return False

    def _commit(self, messages: list[Message]) -> None:
        offsets = [
            TopicPartition(tp.topic, tp.partition, tp.offset, metadata=self._guard.progress(tp.topic, tp.partition,
                                                                                              tp.offset))
            for tp in next_offsets(messages)
        ]  # fmt: skip
        self._commit_offsets(offsets)

    def _commit_offsets(self, offsets: list[TopicPartition]) -> None:
        if not offsets:
            return
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            # Typically a rebalance took the partitions: the new owner re-indexes them onto the same ids.
            log.warning("offset commit failed (records will be re-delivered, same ids): %s", exception_line(exc))

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._commit_offsets(start_marks(consumer, self._guard, partitions, self.config.flush_timeout_s))

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not self._closing:  # a rebalance (from poll): still ours, commit the clean release now
            self._commit_offsets(release_marks(self._guard, partitions))

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._guard.lost(tp.topic, tp.partition)

    def _pause_for(self, seconds: float, dependency: str) -> None:
        """Wait out a backoff without leaving the group: pause, keep polling, stash anything that arrives."""
        self._metrics.retry(dependency)
        assignment = self._consumer.assignment()
        if assignment:
            self._consumer.pause(assignment)
        deadline = time.monotonic() + seconds
        try:
            while not self._stop.is_set() and (left := deadline - time.monotonic()) > 0:
                msg = self._consumer.poll(min(left, 0.5))
                if msg is not None and msg.error() is None:
                    # A partition assigned during the pause is not paused yet: keep its message for later.
                    self._stash.append(msg)
                    self._consumer.pause([TopicPartition(msg.topic() or "", msg.partition() or 0)])
        finally:
            assignment = self._consumer.assignment()
            if assignment:
                self._consumer.resume(assignment)

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now >= self._next_lag:
            self._next_lag = now + self.config.lag_every_s
            self._metrics.update_lag(self._consumer)
        if now >= self._next_retention:
            self._next_retention = now + self.config.retention_every_s
            try:
                deleted = self._indices.sweep()
            except Exception as exc:  # retention is retried next period; indexing must go on
                log.warning("log retention failed, will retry later: %s", exception_line(exc))
            else:
                if deleted:
                    log.info("deleted log indices past retention (age or size): %s", ", ".join(deleted))
