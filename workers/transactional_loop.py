"""The transactional consume-process-produce loop shared by the executor, verifier, judge and episode workers.

Why it is shaped like this:

* Exactly one committed result per generation per role, even when a worker dies mid-run: results, log
  records, dead letters AND the consumer offsets go into one Kafka transaction (``send_offsets_to_transaction``
  with the consumer's group metadata, so a fenced zombie cannot commit). A crash aborts the open transaction;
  the uncommitted generations are consumed and run again by whoever owns the partition next.
* Only a contiguous prefix of finished offsets per partition is committed, and its results are produced in
  that same transaction. A result finished "early" waits for the gap before it, so a crash never leaves a
  produced result whose input offset is uncommitted (which would be run, and produced, twice).
* Per-episode order: one event per (partition, key) runs at a time; the next turn of an episode starts only
  when the previous one finished. Different episodes run concurrently, up to ``concurrency``.
* Backpressure: when ``max_in_flight`` events are buffered, every assigned partition is paused (the consumer
  keeps polling, so it stays in the group); they resume, from exactly where we stopped, below a quarter of
  that (each resume is a seek and a fresh fetch, so the hysteresis is wide).
* SIGTERM (``stop``): no new run starts; running ones get ``drain_timeout_s`` to finish; what finished is
  committed, the rest is re-delivered to the next owner.
* Pods added or removed: rebalancing is incremental (``workers.rebalancing``): only partitions that move are
  revoked; their started runs get ``rebalance_drain_s`` to finish and commit, and no other run is touched.
* The input model is the role's (``GenerationEvent``, or ``ActionEvent`` for the episode worker); a role that
  serves more than one topic (the executor: generations and the gateway's run requests) names the model of each
  extra topic in ``models``, and its runs share the same slots, buffer and transactions. A handler
  with per-partition state is a ``PartitionListener`` and is told of each (re)assignment, an aborted
  transaction's rewind included, before any message of it runs.
* A handler with ``Timers`` (state that expires without input) is asked every ``timer_interval_s`` what
  expired by each partition's event-time clock; what it returns is committed in a transaction of its own.
* One message's failure is that message's: undecodable or invalid -> DLQ at once; a handler that raises is
  retried with backoff, then dead-lettered as a handler crash with its traceback logged (an ``InfrastructureError``,
  a sandbox_error or an outage, is retried until the worker stops). A message that kills the whole process is
  caught by the crash guard (``bus.crash_guard``): after an owner died, the partition's next messages run alone,
  and one that kills the process alone ``crash_attempts`` times is dead-lettered without running again.
* A broker fault is not a crash: a failed transaction is aborted and its work re-run from the committed offsets;
  a producer it left unusable (fatal in librdkafka) is replaced in place when the loop is given ``renew`` (a
  factory of its producer, ``workers.producer_recovery``), so the member keeps its partitions and no crash guard
  runs. Only a fencing by the group drops the work (the partitions' new owner re-runs it).

This module is the loop itself; each of its parts has a module of its own: ``runners`` (the threads that
run the handler), ``committer`` (what one transaction holds), ``backpressure``, ``in_flight`` (what is held
until committed), ``rebalancing`` (the partitions coming and going) and ``loop_config``.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka import KafkaError as LibKafkaError

from bus.access import access_error
from bus.clients import consume_available
from bus.crash_guard import CrashGuard, GiveUp
from bus.errors import from_exception, from_message
from bus.metrics import WorkerMetrics
from bus.transaction import commit_offsets
from schemas.codec import Contract, decode
from schemas.errors import HandlerCrashError, RewardstreamError
from schemas.events import GenerationEvent, LogRecord
from workers.backpressure import Backpressure, buffered
from workers.committer import Committer
from workers.handler import (
    EmptyValueError,
    Ends,
    Handler,
    InfrastructureError,
    Outcome,
    Output,
    PartitionListener,
    Reject,
    ShareListener,
    Timers,
)
from workers.in_flight import Item, PartitionState, timestamp_ms
from workers.logs.shipper import LogShipper
from workers.loop_config import WorkerConfig, WorkerStats
from workers.producer_recovery import ProducerRenewal
from workers.rebalancing import PartitionOwnership
from workers.runners import NOT_STARTED, Runners

log = logging.getLogger(__name__)

_IDS = ("generation_id", "episode_id", "run_id", "task_id")
#: Reads of the committed offsets after an abort before the worker gives up (each up to ``kafka_timeout_s``):
#: without them it would run on from its fetch position, past the work the abort undid.
_REWIND_ATTEMPTS = 3

E = TypeVar("E", bound=Contract)


class TransactionalWorker(PartitionOwnership, Generic[E]):
    """One consumer + one transactional producer + a pool of ``concurrency`` runner threads; ``model`` is the
    input's type (``GenerationEvent`` unless given), ``listener`` the handler's per-partition state if any,
    ``shares`` what paces the sandbox starts by this member's share of the partitions (``fleet_pace``),
    ``renew`` builds a producer like ``producer`` (same config and transactional id) to replace one a broker
    fault left unusable (without it, such a fault ends the worker)."""

    def __init__(
        self,
        config: WorkerConfig,
        handler: Handler[E],
        *,
        consumer: Consumer,
        producer: Producer,
        metrics: WorkerMetrics,
        stop: threading.Event,
        shipper: LogShipper,
        clock: Callable[[], float] = time.monotonic,
        model: type[E] | None = None,
        listener: PartitionListener | None = None,
        timers: Timers | None = None,
        ends: Ends | None = None,
        models: Mapping[str, type[Contract]] | None = None,
        shares: ShareListener | None = None,
        renew: Callable[[], Producer] | None = None,
    ) -> None:
        if models and config.incremental:
            raise ValueError("a worker reading several topics needs a per-topic assignor (WorkerConfig.assignment)")
        if timers is not None and ends is None:
            raise ValueError("a worker with timers needs ends (bus.ends.EndOffsets): where each partition ends")
        self.config = config
        self.handler = handler
        self.model: type[E] = model if model is not None else cast("type[E]", GenerationEvent)
        #: Extra source topics and their input models (the source topic's model is ``model``).
        self.models: dict[str, type[Contract]] = dict(models or {})
        self.listener = listener
        #: Told of this member's share of the group's partitions (its share of the fleet's sandbox starts).
        self.shares = shares
        self._partition_counts: dict[str, int] = {}
        self.timers = timers
        self.ends = ends
        self.consumer = consumer
        self.producer = producer
        self.metrics = metrics
        self.stop = stop
        self.shipper = shipper
        self.stats = WorkerStats()
        self._clock = clock
        self.guard = CrashGuard(config.role, attempts=config.crash_attempts, window=config.buffer_limit)
        self._runners = Runners(config.role, config.concurrency, handler, metrics)
        renewal = None if renew is None else ProducerRenewal(renew, config, stop)
        self._renewal = renewal
        self._committer = Committer(config, producer, consumer, shipper, self.guard, metrics, self.stats,
                                    renew=None if renewal is None else self._renew_producer)  # fmt: skip
        self._parts: dict[tuple[str, int], PartitionState] = {}
        self._runnable: deque[Item] = deque()
        self._delayed: list[tuple[float, Item]] = []
        self._running = 0
        self._flow = Backpressure(consumer, config.role, config.buffer_limit)
        self._draining = False
        self._last_commit = clock()
        self._last_lag = 0.0
        self._last_timers = 0.0
        self._alone: deque[Item] = deque()  # suspect messages waiting to run alone, in arrival order
        self._running_alone: Item | None = None

    # ---- lifecycle -----------------------------------------------------------------------------------
    def run(self) -> WorkerStats:
        """Consume until ``stop`` is set, then drain within the deadline; always closes the consumer."""
        cfg = self.config
        try:
            self.producer.init_transactions(cfg.kafka_timeout_s)
        except KafkaException as exc:
            cause = exc.args[0] if exc.args and isinstance(exc.args[0], LibKafkaError) else None
            denied = access_error(cause, cfg.principal_config, resource=cfg.transactional_id)
            raise denied or from_exception("init transactions", exc) from exc
        self._runners.start()
        try:
            self.consumer.subscribe(
                [cfg.source_topic, *self.models],
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
            while not self.stop.is_set():
                self._step(accept=True)
            self._drain()
        finally:
            self._draining = self._runners.draining = True  # close() revokes: no second wait (rebalancing)
            self._runners.stop()
            try:
                self.consumer.close()
            except Exception as exc:  # a broken consumer must not hide the error that got us here
                log.warning("closing the consumer failed: %s", exc)
        return self.stats

    def _step(self, *, accept: bool) -> None:
        self._collect()
        self._start_runnable()
        now = self._clock()
        # Commit early when finished results fill half the buffer: they count against ``buffer_limit`` until
        # committed, and waiting for the interval paused consumption with every slot idle (a throughput cap of
        # buffer_limit per commit interval). And at once when nothing else is running or waiting to run: no
        # result could join the batch, and whoever waits for this one (an agent's next step) would wait for
        # nothing.
        batch = min(self.config.commit_batch, max(1, self.config.buffer_limit // 2))
        ready = self._ready_count()
        idle = self._running == 0 and not self._runnable and self._running_alone is None
        if ready and (idle or now - self._last_commit >= self.config.commit_interval_s or ready >= batch):
            self._commit()
        self._backpressure()
        timers, ends = self.timers, self.ends
        if (
            timers is not None
            and ends is not None
            and not self._draining
            and now - self._last_timers >= self.config.timer_interval_s
        ):
            self._last_timers = now
            self._expire(timers, ends)
        if now - self._last_lag >= self.config.lag_every_s:
            self._last_lag = now
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s: buffered %d running %d paused %s", self.config.role, self._buffered(), self._running,
                          self._flow.paused)  # fmt: skip
            self.metrics.update_lag(self.consumer)
        try:
            room = max(1, min(500, self.config.buffer_limit - self._buffered()))
            messages = consume_available(self.consumer, room, self.config.poll_timeout_s)
        except KafkaException as exc:
            raise from_exception("consume", exc) from exc
        if accept:
            for msg in messages:
                self._accept(msg)

    def _drain(self) -> None:
        """Stop taking work, let running items finish within the deadline, commit what finished."""
        self._draining = self._runners.draining = True
        self._flow.pause(self._parts.values())
        deadline = self._clock() + self.config.drain_timeout_s
        while self._running > 0 and self._clock() < deadline:
            self._step(accept=False)
        self._collect()
        if self._ready_count():
            self._commit()
        if self._running:
            log.warning("%s: %d runs did not finish within the drain deadline; they will be re-run",
                        self.config.role, self._running)  # fmt: skip

    # ---- consuming -----------------------------------------------------------------------------------
    def _accept(self, msg: Message) -> None:
        error = msg.error()
        if error is not None:
            if error.code() == LibKafkaError._PARTITION_EOF:
                return
            group = error.code() == LibKafkaError.GROUP_AUTHORIZATION_FAILED
            resource = self.config.group_id if group else msg.topic()
            if denied := access_error(error, self.config.principal_config, operation="read", resource=resource):
                raise denied  # an ACL is missing or the login refused: polling on cannot help
            wrapped = from_message("consume", msg)
            if error.fatal():
                raise wrapped
            log.warning("%s", wrapped)
            return
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        if topic is None or partition is None or offset is None:
            return
        part = self._parts.get((topic, partition))
        if part is None or (part.next_offset is not None and offset < part.next_offset):
            return  # not ours (any more), or already accepted before a pause/resume
        part.next_offset = offset + 1
        part.clock_ms = max(part.clock_ms, timestamp_ms(msg))
        item = Item(part, msg, offset, msg.key())
        part.pending[offset] = item
        value = msg.value()
        try:
            if value is None:
                raise EmptyValueError("message has no value (tombstone)")
            item.event = decode(value, self.models.get(topic, self.model))  # raises DecodeError only, for any bytes
        except RewardstreamError as exc:
            item.outcome = Reject(exc)
            return
        if self.guard.suspect(topic, partition, offset):
            item.alone = True
            self._alone.append(item)
            return
        queue = part.episodes.setdefault(item.key, deque())
        queue.append(item)
        if len(queue) == 1:
            self._runnable.append(item)

    def _start_runnable(self) -> None:
        now = self._clock()
        if self._delayed:
            due = [entry for entry in self._delayed if entry[0] <= now]
            self._delayed = [entry for entry in self._delayed if entry[0] > now]
            for _, item in due:
                if item.alone:
                    self._alone.appendleft(item)
                else:
                    self._runnable.append(item)
        if self._running_alone is not None or self._start_alone():
            return  # nothing else runs beside a suspect message, or while one waits for the others to finish
        # Every runnable item is handed to the runners at once (the buffer limit bounds them): a runner finds its
        # next item ready the moment it finishes one, even while this loop is busy committing a transaction.
        while not self._draining and self._runnable:
            item = self._runnable.popleft()
            if not item.part.live or item.part.closing:
                continue
            self._running += 1
            item.part.running += 1
            self._runners.hand(item)

    def _start_alone(self) -> bool:
        """Start the first suspect message once nothing else runs and its partition is committed up to it.

        True while suspect messages wait (normal ones are held back meanwhile: the window is short)."""
        while self._alone and not self._alone[0].part.live:
            self._alone.popleft()
        if not self._alone or self._draining:
            return bool(self._alone)
        item = self._alone[0]
        if self._running > 0:
            return True
        if next(iter(item.part.pending)) != item.offset:  # earlier offsets of its partition are not committed
            self._commit()
            if not item.part.live or next(iter(item.part.pending), None) != item.offset:
                return True
        self._alone.popleft()
        topic, partition = item.part.topic, item.part.partition
        if not item.marked:
            decision = self.guard.before_alone(topic, partition, item.offset)
            if isinstance(decision, GiveUp):
                self._crash_loop(item, decision)
                return bool(self._alone)
            mark = TopicPartition(topic, partition, item.offset, metadata=decision.mark.encode())
            commit_offsets(self.producer, self.consumer, [mark], self.config.kafka_timeout_s)
            item.marked = True
        log.info("%s: running %s[%d]@%d alone (crash guard)", self.config.role, topic, partition, item.offset)
        self._running += 1
        item.part.running += 1
        self._running_alone = item
        self._runners.hand(item)
        return True

    def _crash_loop(self, item: Item, decision: GiveUp) -> None:
        """Dead-letter a message that killed the process each time it ran alone; say so where SREs look."""
        error = decision.error
        log.error("%s: crash loop: %s", self.config.role, error)
        item.outcome = Reject(error, self._record(item, f"dead-lettered ({type(error).__name__}): {error}"))
        self._commit()

    def _record(self, item: Item, message: str, exc: BaseException | None = None) -> LogRecord:
        """An error LogRecord about ``item`` (with its ids and coordinates, and a traceback if given)."""
        ids = {name: getattr(item.event, name, None) for name in _IDS}  # what of them the input model has
        exc_text = "".join(traceback.format_exception(exc)) if exc is not None else None
        return self.shipper.record(
            "error", message, exc_text=exc_text, topic=item.part.topic, partition=item.part.partition,
            offset=item.offset, **ids,
        )  # fmt: skip

    def _collect(self) -> None:
        """Take finished runs from the runner threads; start the next turn of their episodes."""
        while (finished := self._runners.finished()) is not None:
            self._finish(*finished)

    def _finish(self, item: Item, outcome: Outcome | BaseException) -> None:
        """One run came back: keep its outcome (or retry it) unless its partition is gone or being revoked."""
        self._running -= 1
        item.part.running -= 1
        if item is self._running_alone:
            self._running_alone = None
            if item.part.live and not isinstance(outcome, BaseException):
                item.outcome = outcome
                self._commit()  # its result is committed before anything else starts
                return
        if not item.part.live or outcome is NOT_STARTED:
            return
        if isinstance(outcome, BaseException):
            if not item.part.closing:  # a revoked partition's failed run is retried by its next owner
                self._failed_run(item, outcome)
            return
        item.outcome = outcome
        self._next_turn(item)

    def _next_turn(self, item: Item) -> None:
        """``item`` is done: the next event of its episode (same partition, same key) may start."""
        queue = item.part.episodes.get(item.key)
        if queue and queue[0] is item:
            queue.popleft()
            if queue:
                self._runnable.append(queue[0])
            else:
                del item.part.episodes[item.key]

    def _failed_run(self, item: Item, exc: BaseException) -> None:
        """A handler raised: retry with backoff, then dead-letter it; an ``InfrastructureError`` is retried forever."""
        item.attempts += 1
        cfg = self.config
        if isinstance(exc, InfrastructureError) or item.attempts < cfg.handler_attempts:
            delay = cfg.handler_retry.delay(item.attempts)
            log.warning("%s: run of %s[%d]@%d failed (attempt %d), retrying in %.1fs: %s", cfg.role,
                        item.part.topic, item.part.partition, item.offset, item.attempts, delay, exc)  # fmt: skip
            self.metrics.retry("infrastructure" if isinstance(exc, InfrastructureError) else "handler")
            self._delayed.append((self._clock() + delay, item))
            return
        log.error("%s: handler crashed on %s[%d]@%d on all %d attempts; dead-lettering it", cfg.role,
                  item.part.topic, item.part.partition, item.offset, item.attempts, exc_info=exc)  # fmt: skip
        why = f"handler crashed on all {item.attempts} attempts: {type(exc).__name__}: {exc}"
        error = HandlerCrashError(why, topic=item.part.topic, partition=item.part.partition, offset=item.offset)
        item.outcome = Reject(error, self._record(item, f"dead-lettered ({type(error).__name__}): {error}", exc))
        if item.alone:
            self._commit()
            return
        self._next_turn(item)

    # ---- committing ----------------------------------------------------------------------------------
    def _ready_count(self) -> int:
        return sum(part.ready_count() for part in self._parts.values())

    def _expire(self, timers: Timers, ends: Ends) -> None:
        """Commit what expired on each partition by its clock; a partition read to its end (after the broker's
        clock was read) is at the broker's now. A failure is logged and the next tick tries again."""
        try:
            broker_now = timers.now_ms()
            expired: list[Output] = []
            parts = list(self._parts.values())
            ended = ends.ends([TopicPartition(p.topic, p.partition) for p in parts], self.config.kafka_timeout_s)
            for part in parts:
                # nothing read since the assignment: the partition starts at the offset committed then
                position = part.start_offset if part.next_offset is None else part.next_offset
                high = ended.get((part.topic, part.partition), 0)
                if high <= max(position, 0):  # read to the end: nothing appended by broker_now is unread
                    part.clock_ms = max(part.clock_ms, broker_now)
                busy = {i.key for i in part.pending.values()}  # not committed: its trainer cannot see it yet
                expired += timers.expire(part.topic, part.partition, part.epoch, part.clock_ms, busy)
        except (RewardstreamError, KafkaException) as exc:
            log.warning("%s: timers skipped this tick: %s", self.config.role, exc)
            return
        if expired:
            self._commit(expired)

    def _commit(self, extra: Sequence[Output] = ()) -> None:
        """One transaction of every ready result (``workers.committer``), and ``extra`` (what timers expired);
        after an abortable failure, re-run what was not committed."""
        done = self._committer.commit(self._parts.values(), extra)
        if done == "committed":
            self._last_commit = self._clock()
        elif done == "aborted":
            self._rewind()

    def _renew_producer(self, old: Producer) -> Producer:
        """A new transactional producer in place of ``old`` for everything of the loop that produces."""
        if self._renewal is None:
            raise RuntimeError("no renew was given to replace the producer")
        self.producer = self._renewal(old)
        self.shipper.use(self.producer)
        self.metrics.retry("kafka")
        return self.producer

    def _rewind(self) -> None:
        """Forget every buffered item and seek each partition back to its committed offset."""
        tps = [TopicPartition(p.topic, p.partition) for p in self._parts.values()]
        for part in self._parts.values():
            part.live = False
        self._parts = {(tp.topic, tp.partition): PartitionState(tp.topic, tp.partition) for tp in tps}
        self._runnable.clear()
        self._delayed.clear()
        self._alone.clear()
        if not tps:
            return
        for attempt in range(1, _REWIND_ATTEMPTS + 1):
            try:
                committed = self.consumer.committed(tps, timeout=self.config.kafka_timeout_s)
                for tp in committed:
                    offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
                break
            except KafkaException as exc:  # the group coordinator moving (a broker fault): ask again
                if attempt == _REWIND_ATTEMPTS or self.stop.is_set():
                    raise from_exception("rewind to committed offsets", exc) from exc
                log.warning("%s: reading the committed offsets failed (attempt %d): %s", self.config.role, attempt, exc)
        self._tell_assigned(tps)  # the aborted transaction's state writes are gone: back to the committed state

    def _tell_assigned(self, partitions: list[TopicPartition]) -> None:
        if self.listener is not None:
            for tp in partitions:
                part = self._parts[(tp.topic, tp.partition)]
                self.listener.assigned(part.topic, part.partition, part.epoch)

    # ---- backpressure --------------------------------------------------------------------------------
    def _buffered(self) -> int:
        return buffered(self._parts.values())

    def _backpressure(self) -> None:
        if not self._draining:
            self._flow.update(self._parts.values())
