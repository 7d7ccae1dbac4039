"""How the transactional worker loop commits: one Kafka transaction holds every ready result, log record and
dead letter of its partitions and the input offsets after them (``bus.transaction``).

Why apart from the loop: the loop decides when to commit and what to do after an abort (rewind to the
committed offsets); what one transaction contains, and what it counts, is this module's. A failed transaction is
aborted; a producer it left unusable is replaced in place (``workers.producer_recovery``): either way the loop
re-runs what was not committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from confluent_kafka import Consumer, Producer, TopicPartition

from bus.access import KafkaAccessError, access_line, is_denied
from bus.crash_guard import CrashGuard
from bus.dead_letters import publish_dead_letter
from bus.delivery import DeliveryTracker
from bus.errors import KafkaClientError
from bus.metrics import WorkerMetrics
from bus.transaction import Transaction
from workers.handler import Done, Output, Reject
from workers.in_flight import Item, PartitionState, timestamp_ms
from workers.logs.shipper import LogShipper
from workers.loop_config import WorkerConfig, WorkerStats
from workers.producer_recovery import recovery_for
from workers.sandbox.error_kinds import sandbox_error_kind

log = logging.getLogger("workers.transactional_loop")

#: What a commit did: nothing was ready, a transaction committed, or it failed and was aborted (the loop
#: then re-runs what was not committed; the producer may have been replaced meanwhile).
Committed = Literal["nothing", "committed", "aborted"]


class Committer:
    """The loop's transactional producer, as one transaction per commit; ``renew`` replaces a producer that a
    failure left unusable (given the old one, returns a new one with its transactions initialised), or None:
    such a failure then ends the worker."""

    def __init__(  # noqa: PLR0917 - the loop's own parts
        self,
        config: WorkerConfig,
        producer: Producer,
        consumer: Consumer,
        shipper: LogShipper,
        guard: CrashGuard,
        metrics: WorkerMetrics,
        stats: WorkerStats,
        renew: Callable[[Producer], Producer] | None = None,
    ) -> None:
        self.config = config
        self.consumer = consumer
        self.renew = renew
        self.producer = producer
        self.shipper = shipper
        self.guard = guard
        self.metrics = metrics
        self.stats = stats
        self._tracker = DeliveryTracker()
        self._txn = Transaction(producer, consumer, config.kafka_timeout_s, self._tracker)

    def commit(self, parts: Iterable[PartitionState], extra: Sequence[Output] = ()) -> Committed:
        """One transaction: every ready result, log record and dead letter, plus the offsets after them (and
        ``extra``: what timers expired). A failure aborts (``_transaction_failed``)."""
        ready, offsets = self._take_ready(parts)
        if not offsets and not extra:
            return "nothing"
        txn = self._txn
        try:
            txn.begin()
        except KafkaClientError as exc:
            return self._transaction_failed(exc)
        try:
            for item in ready:
                self._publish(item, txn)
            for out in extra:
                txn.produce(out.topic, out.key, out.value, partition=out.partition)
        except KafkaClientError as exc:
            if exc.fatal:  # the producer failed under the transaction (a broker fault): abort or replace it
                return self._transaction_failed(exc)
            self.abort()  # its queue stayed full, or a message Kafka refuses: running again cannot help
            raise
        for tp in offsets:
            txn.offset(tp.topic, tp.partition, tp.offset, tp.metadata or "")
        try:
            txn.commit()
        except KafkaClientError as exc:
            return self._transaction_failed(exc)
        self._tracker.raise_first()
        self.stats.transactions += 1
        self.stats.committed += len(ready)
        for item in ready:
            self._count(item.outcome)
        return "committed"

    def _denied(self, exc: KafkaClientError) -> KafkaAccessError | None:
        """The missing ACL behind a failed transaction: a refused delivery (its topic), the offsets' group or
        the transactional id; None when it failed otherwise."""
        cfg = self.config
        refused = [error for error in self._tracker.errors
                   if isinstance(error, KafkaClientError) and is_denied(error.code)]  # fmt: skip
        if refused:
            self._tracker.errors = []
            cause, operation, resource = refused[0], "write", refused[0].topic
        elif is_denied(exc.code):
            cause, operation = exc, "use"
            resource = cfg.group_id if exc.code == "GROUP_AUTHORIZATION_FAILED" else cfg.transactional_id
        else:
            return None
        line = access_line(cause.code, str(cause), cfg.principal_config, operation=operation, resource=resource)
        return None if line is None else KafkaAccessError(line)

    def _count(self, outcome: Done | Reject | None) -> None:
        """The stats and metrics of one committed outcome."""
        if isinstance(outcome, Done):
            self.stats.results += 1
            self.metrics.processed()
            if outcome.status == "sandbox_error":
                self.metrics.sandbox_error(sandbox_error_kind(outcome.run.error if outcome.run is not None else None))
            if outcome.run is not None:
                self.metrics.sandbox_run(outcome.run.wait_ms / 1000, outcome.run.host_retries)
            if outcome.committed is not None:
                outcome.committed()
        elif isinstance(outcome, Reject):
            self.stats.dead_letters += 1
            self.metrics.dead_letter(type(outcome.error).__name__)

    def abort(self) -> None:
        self.stats.aborted += 1
        self._txn.abort()

    def _take_ready(self, parts: Iterable[PartitionState]) -> tuple[list[Item], list[TopicPartition]]:
        ready: list[Item] = []
        offsets: list[TopicPartition] = []
        for part in parts:
            taken = part.take_ready()
            if taken:
                ready += taken
                after = taken[-1].offset + 1
                metadata = self.guard.progress(part.topic, part.partition, after)
                offsets.append(TopicPartition(part.topic, part.partition, after, metadata=metadata))
        return ready, offsets

    def _publish(self, item: Item, txn: Transaction) -> None:
        outcome = item.outcome
        if isinstance(outcome, Reject):
            publish_dead_letter(self.producer, self.config.dlq_topic, item.msg, component=self.config.role,
                                error=outcome.error, tracker=self._tracker)  # fmt: skip
            if outcome.log is not None:
                self.shipper.emit(outcome.log)
            return
        if not isinstance(outcome, Done):
            return
        # Results carry their generation's timestamp (as Kafka Streams' outputs inherit their input's): the reward
        # processor's deadlines run in generation time, so a role that lags is never mistaken for a dead one.
        stamp = timestamp_ms(item.msg)
        for out in outcome.outputs:
            txn.produce(out.topic, out.key, out.value, partition=out.partition, timestamp_ms=stamp)
        if outcome.log is not None:
            self.shipper.emit(outcome.log)

    def _transaction_failed(self, exc: KafkaClientError) -> Committed:
        """Abort the failed transaction (the loop re-runs from the committed offsets); a producer left unusable
        (fatal, or its abort failed too) is replaced first. A missing ACL ends the worker: re-running the batch
        would be refused again, forever."""
        if (denied := self._denied(exc)) is not None:
            if not exc.fatal:
                self.abort()
            raise denied from exc
        recovery = recovery_for(exc)
        if not recovery.renew:
            log.warning("%s: transaction failed, %s: %s", self.config.role, recovery.why, exc)
            try:
                self.abort()
                return "aborted"
            except KafkaClientError as again:
                exc, recovery = again, recovery_for(again, abort_failed=True)
        if self.renew is None:
            raise exc
        log.warning("%s: transaction failed, %s: %s", self.config.role, recovery.why, exc)
        self.stats.aborted += 1
        self.stats.renewed += 1
        self.use(self.renew(self.producer))
        return "aborted"

    def use(self, producer: Producer) -> None:
        """Commit with ``producer`` from now on (a replacement, its transactions initialised)."""
        self.producer = producer
        self._tracker = DeliveryTracker()
        self._txn = Transaction(producer, self.consumer, self.config.kafka_timeout_s, self._tracker)
