"""How the transactional worker loop commits: one Kafka transaction holds every ready result, log record and
dead letter of its partitions and the input offsets after them (``bus.transaction``).

Why apart from the loop: the loop decides when to commit and what to do after an abort (rewind to the
committed offsets); what one transaction contains, and what it counts, is this module's. A failed transaction is
aborted; a producer it left unusable is replaced in place (``workers.producer_recovery``): either way the loop
re-runs what was not committed.
"""

from __future__ import annotations

import logging
import time
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
#: then re-runs what was not committed; the producer may have been replaced meanwhile), or the group fenced it
#: and its finished results were put back to be committed again ("requeued": nothing to re-run).
Committed = Literal["nothing", "committed", "aborted", "requeued"]
#: How long the finished results of transactions the group fenced are put back to be committed again: a
#: rebalance bumped the group's generation under the commit, and the member keeps its partitions through it
#: (cooperative rebalancing) once it has rejoined. Past this, they are dropped and re-run from the committed
#: offsets, as for any other failed transaction.
REQUEUE_WINDOW_S = 30.0
#: After the group fenced a commit, how long the next one waits: the member's rejoin takes a poll or more, and
#: asking sooner is refused the same way.
REQUEUE_PAUSE_S = 0.5


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
        #: When the first of the group's fencings in a row failed a commit (``REQUEUE_WINDOW_S``), or None.
        self._fenced_since: float | None = None
        #: No commit is tried before this (``REQUEUE_PAUSE_S`` after a fenced one).
        self._paused_until = 0.0
        self._clock = time.monotonic

    def commit(self, parts: Iterable[PartitionState], extra: Sequence[Output] = ()) -> Committed:
        """One transaction: every ready result, log record and dead letter, plus the offsets after them (and
        ``extra``: what timers expired). A failure aborts (``_transaction_failed``); a fencing by the group puts
        the results back (``_requeue``), and the commits of the next ``REQUEUE_PAUSE_S`` do nothing."""
        parts = list(parts)
        ready, offsets = ([], []) if self._paused(parts, extra) else self._take_ready(parts)
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
            if self._may_requeue(exc, ready, extra):
                return self._requeue(exc, ready)
            return self._transaction_failed(exc)
        self._fenced_since = None
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

    def _paused(self, parts: list[PartitionState], extra: Sequence[Output]) -> bool:
        """Whether this commit waits out ``REQUEUE_PAUSE_S``: never with timer outputs, nor when a suspect
        message's result is ready (the crash guard commits it before anything else may start)."""
        if extra or self._clock() >= self._paused_until:
            return False
        return not any(item.alone and item.ready() for part in parts for item in part.pending.values())

    def _may_requeue(self, exc: KafkaClientError, ready: list[Item], extra: Sequence[Output]) -> bool:
        """Whether the failed transaction's results may be put back rather than re-run: ``exc`` is the group
        fencing the commit (its generation moved on), within the requeue window (its first such failure in a row
        starts it), and the transaction held only results of ordinary messages, all delivered (no timer output,
        no suspect message of the crash guard, no refused delivery: those keep the abort-and-rewind)."""
        recovery = recovery_for(exc)
        if not recovery.fenced_by_group or recovery.renew or extra or self._tracker.errors:
            return False
        if any(item.alone for item in ready):
            return False
        now = self._clock()
        if self._fenced_since is None:
            self._fenced_since = now
        return now - self._fenced_since < REQUEUE_WINDOW_S

    def _requeue(self, exc: KafkaClientError, ready: list[Item]) -> Committed:
        """Abort the transaction the group fenced and put its finished results back in their partitions (those
        still assigned; a revoked one's are its next owner's to run): the next commit, under the generation the
        member rejoins with, holds them again. Without this, a rebalance on a busy cluster threw away every
        finished run of the partitions a member kept, and ran them again."""
        try:
            self.abort()
        except KafkaClientError as again:
            return self._transaction_failed(again)
        parts: dict[int, tuple[PartitionState, list[Item]]] = {}
        for item in ready:
            parts.setdefault(id(item.part), (item.part, []))[1].append(item)
        kept = 0
        for part, items in parts.values():
            if part.live:
                part.put_back(items)
                kept += len(items)
        log.warning("%s: transaction failed, the group's generation moved on under it: %d finished results kept "
                    "for the next commit: %s", self.config.role, kept, exc)  # fmt: skip
        self._paused_until = self._clock() + REQUEUE_PAUSE_S
        return "requeued"

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
