"""What a transactional worker does when the group's partitions move: incremental (cooperative) rebalancing.

Why: the workers' groups use ``cooperative-sticky`` (``bus.config.consumer_config``), so when a pod joins or
leaves only the partitions that move are revoked and assigned; every other member keeps its partitions and its
runs going. ``on_assign`` and ``on_revoke`` therefore get only the delta: assigning is ``incremental_assign``,
and nothing of a partition not named in a revoke is ever dropped. The executor reads two topics and stays on
eager ``range`` (``WorkerConfig.assignment``): sticky balances partition counts, not topics, and gave one of two
members every generation partition and the other every run request. Its revokes name every partition, and
the drain below still saves their started runs.

On revoke, the runs of the revoked partitions already started get ``rebalance_drain_s`` to finish (nothing new
of them starts; items handed to the runners but not started are left), and what finished is committed while
the member still owns them; what remains is dropped and re-run by the next owner. The drain waits inside the
poll callback: heartbeats run on librdkafka's own thread, and the group's follow-up rebalance waits for this
member at most the rebalance timeout (``max.poll.interval.ms``), far above the drain. A lost partition (the
session expired: another member may own it already) cannot commit, so it is dropped at once.

After every change the member's count of partitions, out of all those of the topics it reads, goes to
``shares`` (its share of the fleet's sandbox starts, ``workers.sandbox.fleet_pace``): set after a revoke's
drain, so the runs being drained still start at the old share. A topic's partition count is read once from the
consumer's metadata (again only if an owned partition lies beyond it); unreadable, the share is 0 (nothing
starts, the runs are retried) until the next assignment: never more than the fleet's cap.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from bus.crash_guard import CrashGuard, release_marks, start_marks
from bus.transaction import commit_offsets
from schemas.errors import RewardstreamError
from workers.backpressure import Backpressure
from workers.handler import Outcome, PartitionListener, ShareListener
from workers.in_flight import Item, PartitionState
from workers.loop_config import WorkerConfig
from workers.runners import Runners

log = logging.getLogger("workers.transactional_loop")


class PartitionOwnership:
    """The rebalance callbacks of ``workers.transactional_loop.TransactionalWorker`` (a mixin: the loop's state)."""

    config: WorkerConfig
    consumer: Consumer
    producer: Producer
    guard: CrashGuard
    listener: PartitionListener | None
    shares: ShareListener | None
    models: dict[str, Any]
    _partition_counts: dict[str, int]
    _clock: Callable[[], float]
    _parts: dict[tuple[str, int], PartitionState]
    _runnable: deque[Item]
    _delayed: list[tuple[float, Item]]
    _alone: deque[Item]
    _flow: Backpressure
    _draining: bool
    _runners: Runners[Any]

    # The loop's own steps, used here.
    def _collect(self) -> None:
        raise NotImplementedError

    def _finish(self, item: Item, outcome: Outcome | BaseException) -> None:
        raise NotImplementedError

    def _ready_count(self) -> int:
        raise NotImplementedError

    def _commit(self) -> None:
        raise NotImplementedError

    def _tell_assigned(self, partitions: list[TopicPartition]) -> None:
        raise NotImplementedError

    # ---- the callbacks -------------------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Start the newly assigned ``partitions`` (only those: the others keep their state and their runs)."""
        log.info("%s: assigned %s", self.config.role, sorted(tp.partition for tp in partitions))
        for tp in partitions:
            self._parts[(tp.topic, tp.partition)] = PartitionState(tp.topic, tp.partition)
        # librdkafka keeps a partition's pause flag across rebalances: a partition paused (backpressure) when
        # it was revoked would come back paused and never be fetched. Assign first, then set the flag we want.
        if self.config.incremental:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        if partitions:
            if self._flow.paused or self._draining:
                consumer.pause(partitions)
            else:
                consumer.resume(partitions)
        marks = start_marks(consumer, self.guard, partitions, self.config.kafka_timeout_s)
        for mark in marks:  # where each partition starts: its committed offset (or log start), read once
            self._parts[(mark.topic, mark.partition)].start_offset = mark.offset
        commit_offsets(self.producer, consumer, marks, self.config.kafka_timeout_s)
        self._tell_assigned(partitions)
        self._tell_share()

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Let the revoked partitions' runs finish (bounded), commit what is ready while we still own them, drop
        the rest (the next owner re-runs it)."""
        log.info("%s: revoked %s", self.config.role, sorted(tp.partition for tp in partitions))
        revoked = [part for tp in partitions if (part := self._parts.get((tp.topic, tp.partition))) is not None]
        self._settle(revoked)
        try:
            if self._ready_count():
                self._commit()
            commit_offsets(self.producer, self.consumer, release_marks(self.guard, partitions),
                           self.config.kafka_timeout_s)  # fmt: skip
        except RewardstreamError as exc:
            log.warning("%s: commit on revoke failed; the new owner re-runs: %s", self.config.role, exc)
        self._drop(partitions)

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning("%s: lost %s", self.config.role, sorted(tp.partition for tp in partitions))
        for tp in partitions:
            self.guard.lost(tp.topic, tp.partition)
        self._drop(partitions)

    # ---- draining and dropping -----------------------------------------------------------------------
    def _settle(self, parts: list[PartitionState]) -> None:
        """Wait up to ``rebalance_drain_s`` for the started runs of ``parts`` to come back; start none of theirs.

        Runs of other partitions keep running and are collected meanwhile (their next turns start after the
        callback). On SIGTERM the loop's own drain already had ``drain_timeout_s``: no second wait."""
        for part in parts:
            part.closing = True
        self._collect()
        if self._draining or not parts:
            return
        deadline = self._clock() + self.config.rebalance_drain_s
        while any(part.running for part in parts) and (left := deadline - self._clock()) > 0:
            finished = self._runners.finished(wait_s=min(left, 0.1))
            if finished is not None:
                self._finish(*finished)
        self._collect()
        unfinished = sum(part.running for part in parts)
        if unfinished:
            log.warning("%s: %d runs of revoked partitions did not finish within %.1fs; the next owner re-runs them",
                        self.config.role, unfinished, self.config.rebalance_drain_s)  # fmt: skip

    def _drop(self, partitions: list[TopicPartition]) -> None:
        """Forget ``partitions``: their results still to come are discarded, their queued items never start."""
        try:
            if partitions:
                self.consumer.resume(partitions)  # clear our pause flag; see _on_assign
        except KafkaException as exc:
            log.debug("resume of revoked partitions failed: %s", exc)
        for tp in partitions:
            part = self._parts.pop((tp.topic, tp.partition), None)
            if part is not None:
                part.live = False
                if self.listener is not None:
                    self.listener.revoked(part.topic, part.partition)
        self._runnable = deque(item for item in self._runnable if item.part.live)
        self._delayed = [(due, item) for due, item in self._delayed if item.part.live]
        self._alone = deque(item for item in self._alone if item.part.live)
        self._tell_share()

    # ---- the share of the fleet --------------------------------------------------------------------------
    def _tell_share(self) -> None:
        """Tell ``shares`` how many of the group's partitions this member owns now."""
        if self.shares is None:
            return
        try:
            total = sum(self._partition_count(topic) for topic in (self.config.source_topic, *self.models))
        except KafkaException as exc:
            log.error("%s: partition counts unreadable (%s): no sandbox starts until the next assignment",
                      self.config.role, exc)  # fmt: skip
            self.shares.owned(0, 0)
            return
        self.shares.owned(len(self._parts), total)

    def _partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has: cached, read again when an owned partition lies beyond it."""
        beyond = max((p + 1 for t, p in self._parts if t == topic), default=0)
        count = self._partition_counts.get(topic, 0)
        if count < max(beyond, 1):
            meta = self.consumer.list_topics(topic, timeout=self.config.kafka_timeout_s).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise KafkaException(f"no metadata of {topic}: {None if meta is None else meta.error}")
            count = self._partition_counts[topic] = len(meta.partitions)
        return max(count, beyond)
