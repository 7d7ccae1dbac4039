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
* The input model is the role's (``GenerationEvent``, or ``ActionEvent`` for the episode worker); a role that
  serves more than one topic (the executor: generations and the gateway's run requests) names the model of each
  extra topic in ``models``, and its runs share the same slots, buffer and transactions. A handler
  with per-partition state is a ``PartitionListener`` and is told of each (re)assignment, an aborted
  transaction's rewind included, before any message of it runs.
* A handler with ``Timers`` (state that expires without input) is asked every ``timer_interval_s`` what
  expired by each partition's event-time clock; what it returns is committed in a transaction of its own.
* One message's failure is that message's: undecodable or invalid -> DLQ at once; a handler that raises is
  retried with backoff (S3 or registry hiccups), then dead-lettered as a handler crash with its traceback
  logged. A message that kills the whole process is caught by the crash guard (``bus.crash_guard``): after
  an owner died, the partition's next messages run alone, and one that kills the process alone
  ``crash_attempts`` times is dead-lettered without running again.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import Generic, TypeVar, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka import KafkaError as LibKafkaError

from bus.clients import consume_available
from bus.crash_guard import DEFAULT_ATTEMPTS, CrashGuard, GiveUp, release_marks, start_marks
from bus.dead_letters import publish_dead_letter
from bus.delivery import DeliveryTracker
from bus.errors import KafkaClientError, from_exception, from_message
from bus.metrics import WorkerMetrics
from bus.transaction import Transaction, commit_offsets
from schemas.codec import Contract, decode
from schemas.errors import HandlerCrashError, RewardstreamError
from schemas.events import GenerationEvent, LogRecord
from workers.handler import (
    Done,
    EmptyValueError,
    Ends,
    Handler,
    InvalidEventError,
    Outcome,
    Output,
    PartitionListener,
    Reject,
    Source,
    Timers,
)
from workers.in_flight import Item, PartitionState
from workers.logs.shipper import LogShipper

log = logging.getLogger(__name__)


#: What a runner reports for an item it was handed but did not start because the worker is draining.
_NOT_STARTED = Done(())
_IDS = ("generation_id", "episode_id", "run_id", "task_id")

E = TypeVar("E", bound=Contract)


def _timestamp_ms(msg: Message) -> int:
    """The message's timestamp (the broker's on a ``LogAppendTime`` topic), 0 when it has none."""
    stamp_type, stamp = msg.timestamp()
    return stamp if stamp_type != TIMESTAMP_NOT_AVAILABLE and stamp > 0 else 0


@dataclass(frozen=True)
class WorkerConfig:
    """Knobs of one worker; ``rewardstream.cli.worker`` builds it from Settings."""

    role: str
    source_topic: str
    dlq_topic: str
    group_id: str
    transactional_id: str
    concurrency: int = 2
    max_in_flight: int = 0  # 0: 16 x concurrency, at least 64
    commit_interval_s: float = 0.5  # each transaction costs the broker; results wait at most this long
    commit_batch: int = 500
    poll_timeout_s: float = 0.02
    drain_timeout_s: float = 30.0
    kafka_timeout_s: float = 30.0
    handler_attempts: int = 5
    handler_backoff_s: float = 0.5
    handler_backoff_max_s: float = 10.0
    lag_every_s: float = 5.0
    timer_interval_s: float = 1.0
    #: Deaths of the process while one message ran alone before that message is dead-lettered unrun.
    crash_attempts: int = DEFAULT_ATTEMPTS

    @property
    def buffer_limit(self) -> int:
        """Events buffered (accepted, not yet committed) before the partitions are paused."""
        return self.max_in_flight if self.max_in_flight > 0 else max(64, 16 * self.concurrency)


@dataclass
class WorkerStats:
    """What this worker committed (for tests and the CLI's exit line)."""

    committed: int = 0
    results: int = 0
    dead_letters: int = 0
    transactions: int = 0
    aborted: int = 0


class TransactionalWorker(Generic[E]):
    """One consumer + one transactional producer + a pool of ``concurrency`` runner threads; ``model`` is the
    input's type (``GenerationEvent`` unless given), ``listener`` the handler's per-partition state if any."""

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
    ) -> None:
        if timers is not None and ends is None:
            raise ValueError("a worker with timers needs ends (bus.ends.EndOffsets): where each partition ends")
        self.config = config
        self.handler = handler
        self.model: type[E] = model if model is not None else cast("type[E]", GenerationEvent)
        #: Extra source topics and their input models (the source topic's model is ``model``).
        self.models: dict[str, type[Contract]] = dict(models or {})
        self.listener = listener
        self.timers = timers
        self.ends = ends
        self.consumer = consumer
        self.producer = producer
        self.metrics = metrics
        self.stop = stop
        self.shipper = shipper
        self.stats = WorkerStats()
        self._clock = clock
        self._tracker = DeliveryTracker()
        self._txn = Transaction(producer, consumer, config.kafka_timeout_s, self._tracker)
        self._parts: dict[tuple[str, int], PartitionState] = {}
        self._runnable: deque[Item] = deque()
        self._delayed: list[tuple[float, Item]] = []
        self._done: SimpleQueue[tuple[Item, Outcome | BaseException]] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._work: SimpleQueue[Item | None] = SimpleQueue()
        self._running = 0
        self._paused = False
        self._draining = False
        self._last_commit = clock()
        self._last_lag = 0.0
        self._last_timers = 0.0
        self.guard = CrashGuard(config.role, attempts=config.crash_attempts, window=config.buffer_limit)
        self._alone: deque[Item] = deque()  # suspect messages waiting to run alone, in arrival order
        self._running_alone: Item | None = None

    # ---- lifecycle -----------------------------------------------------------------------------------
    def run(self) -> WorkerStats:
        """Consume until ``stop`` is set, then drain within the deadline; always closes the consumer."""
        cfg = self.config
        try:
            self.producer.init_transactions(cfg.kafka_timeout_s)
        except KafkaException as exc:
            raise from_exception("init transactions", exc) from exc
        for n in range(cfg.concurrency):
            thread = threading.Thread(target=self._runner, name=f"{cfg.role}-run-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
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
            for _ in self._threads:
                self._work.put(None)
            for thread in self._threads:
                thread.join(timeout=1.0)
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
                          self._paused)  # fmt: skip
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
        self._draining = True
        self._pause_all()
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
        part.clock_ms = max(part.clock_ms, _timestamp_ms(msg))
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
            if not item.part.live:
                continue
            self._running += 1
            self._work.put(item)

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
        self._running_alone = item
        self._work.put(item)
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

    def _runner(self) -> None:
        """Runner thread: handle items one at a time; outcomes (or the exception) go back to the loop."""
        while True:
            item = self._work.get()
            if item is None:
                return
            event = item.event
            if self._draining:  # handed over but not started: leave it uncommitted (re-delivered later)
                self._done.put((item, _NOT_STARTED))
                continue
            try:
                if event is None:  # never queued without an event; defensive
                    raise InvalidEventError("no event")
                source = Source(item.part.topic, item.part.partition, item.offset, _timestamp_ms(item.msg),
                                item.part.epoch)  # fmt: skip
                with self.metrics.in_flight():
                    outcome: Outcome | BaseException = self.handler.handle(cast("E", event), source)
            except InvalidEventError as exc:  # retrying cannot fix the event: dead-letter it now
                outcome = Reject(exc)
            except Exception as exc:  # one message's failure is that message's: retried, then dead-lettered
                outcome = exc
            self._done.put((item, outcome))

    def _collect(self) -> None:
        """Take finished runs from the runner threads; start the next turn of their episodes."""
        while True:
            try:
                item, outcome = self._done.get_nowait()
            except Empty:
                return
            self._running -= 1
            if item is self._running_alone:
                self._running_alone = None
                if item.part.live and not isinstance(outcome, BaseException):
                    item.outcome = outcome
                    self._commit()  # its result is committed before anything else starts
                    continue
            if not item.part.live or outcome is _NOT_STARTED:
                continue
            if isinstance(outcome, BaseException):
                self._failed_run(item, outcome)
                continue
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
        """A handler raised: retry with backoff (S3/registry hiccups); after the last attempt, dead-letter it."""
        item.attempts += 1
        cfg = self.config
        if item.attempts < cfg.handler_attempts:
            delay = min(cfg.handler_backoff_max_s, cfg.handler_backoff_s * 2 ** (item.attempts - 1))
            log.warning("%s: run of %s[%d]@%d failed (attempt %d), retrying in %.1fs: %s", cfg.role,
                        item.part.topic, item.part.partition, item.offset, item.attempts, delay, exc)  # fmt: skip
            self.metrics.retry("handler")
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

    def _take_ready(self) -> tuple[list[Item], list[TopicPartition]]:
        ready: list[Item] = []
        offsets: list[TopicPartition] = []
        for part in self._parts.values():
            taken = part.take_ready()
            if taken:
                ready += taken
                after = taken[-1].offset + 1
                metadata = self.guard.progress(part.topic, part.partition, after)
                offsets.append(TopicPartition(part.topic, part.partition, after, metadata=metadata))
        return ready, offsets

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
                busy = {*part.episodes, *(i.key for i in self._alone if i.part is part)}
                if self._running_alone is not None and self._running_alone.part is part:
                    busy.add(self._running_alone.key)
                expired += timers.expire(part.topic, part.partition, part.epoch, part.clock_ms, busy)
        except (RewardstreamError, KafkaException) as exc:
            log.warning("%s: timers skipped this tick: %s", self.config.role, exc)
            return
        if expired:
            self._commit(expired)

    def _commit(self, extra: Sequence[Output] = ()) -> None:
        """One transaction: every ready result, log record and dead letter, plus the offsets after them (and
        ``extra``: what timers expired)."""
        ready, offsets = self._take_ready()
        if not offsets and not extra:
            return
        txn = self._txn
        try:
            txn.begin()
        except KafkaClientError as exc:
            self._transaction_failed(exc)
            return
        try:
            for item in ready:
                self._publish(item, txn)
            for out in extra:
                txn.produce(out.topic, out.key, out.value, partition=out.partition)
        except KafkaClientError:  # the producer's queue stayed full: the broker is gone
            self._abort()
            raise
        for tp in offsets:
            txn.offset(tp.topic, tp.partition, tp.offset, tp.metadata or "")
        try:
            txn.commit()
        except KafkaClientError as exc:
            self._transaction_failed(exc)
            return
        self._last_commit = self._clock()
        self._tracker.raise_first()
        self.stats.transactions += 1
        self.stats.committed += len(ready)
        for item in ready:
            outcome = item.outcome
            if isinstance(outcome, Done):
                self.stats.results += 1
                self.metrics.processed()
                if outcome.status == "sandbox_error":
                    self.metrics.sandbox_error()
            elif isinstance(outcome, Reject):
                self.stats.dead_letters += 1
                self.metrics.dead_letter(type(outcome.error).__name__)

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
        timestamp_ms = _timestamp_ms(item.msg)
        for out in outcome.outputs:
            txn.produce(out.topic, out.key, out.value, partition=out.partition, timestamp_ms=timestamp_ms)
        if outcome.log is not None:
            self.shipper.emit(outcome.log)

    def _transaction_failed(self, exc: KafkaClientError) -> None:
        """An abortable failure (e.g. a rebalance took the partitions): abort and re-run from the committed
        offsets. A fatal one (fenced by a newer instance) ends the worker."""
        if exc.fatal:
            raise exc
        log.warning("%s: transaction failed, aborting and re-running uncommitted work: %s", self.config.role, exc)
        self._abort()
        self._rewind()

    def _abort(self) -> None:
        self.stats.aborted += 1
        self._txn.abort()

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
        try:
            committed = self.consumer.committed(tps, timeout=self.config.kafka_timeout_s)
            for tp in committed:
                offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        except KafkaException as exc:
            raise from_exception("rewind to committed offsets", exc) from exc
        self._tell_assigned(tps)  # the aborted transaction's state writes are gone: back to the committed state

    def _tell_assigned(self, partitions: list[TopicPartition]) -> None:
        if self.listener is not None:
            for tp in partitions:
                part = self._parts[(tp.topic, tp.partition)]
                self.listener.assigned(part.topic, part.partition, part.epoch)

    # ---- backpressure --------------------------------------------------------------------------------
    def _buffered(self) -> int:
        return sum(len(p.pending) for p in self._parts.values())

    def _backpressure(self) -> None:
        if self._draining:
            return
        buffered = self._buffered()
        if not self._paused and buffered >= self.config.buffer_limit:
            self._pause_all()
        elif self._paused and buffered <= self.config.buffer_limit // 4:  # wide hysteresis: few refetches
            self._resume_all()

    def _pause_all(self) -> None:
        tps = [TopicPartition(p.topic, p.partition) for p in self._parts.values()]
        log.debug("%s: pausing %s", self.config.role, [tp.partition for tp in tps])
        if tps:
            self.consumer.pause(tps)
        self._paused = True

    def _resume_all(self) -> None:
        tps = [TopicPartition(p.topic, p.partition) for p in self._parts.values()]
        log.debug("%s: resuming %s", self.config.role, [(p.partition, p.next_offset) for p in self._parts.values()])
        if tps:
            self.consumer.resume(tps)
            for part in self._parts.values():
                if part.next_offset is not None:  # continue exactly after the last accepted message
                    self.consumer.seek(TopicPartition(part.topic, part.partition, part.next_offset))
        self._paused = False

    # ---- rebalancing ---------------------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("%s: assigned %s", self.config.role, sorted(tp.partition for tp in partitions))
        for tp in partitions:
            self._parts[(tp.topic, tp.partition)] = PartitionState(tp.topic, tp.partition)
        # librdkafka keeps a partition's pause flag across rebalances: a partition paused (backpressure) when
        # it was revoked would come back paused and never be fetched. Assign first, then set the flag we want.
        consumer.assign(partitions)
        if self._paused or self._draining:
            consumer.pause(partitions)
        else:
            consumer.resume(partitions)
        marks = start_marks(consumer, self.guard, partitions, self.config.kafka_timeout_s)
        for mark in marks:  # where each partition starts: its committed offset (or log start), read once
            self._parts[(mark.topic, mark.partition)].start_offset = mark.offset
        commit_offsets(self.producer, consumer, marks, self.config.kafka_timeout_s)
        self._tell_assigned(partitions)

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Commit what is ready while we still own the partitions; drop the rest (the next owner re-runs it)."""
        log.info("%s: revoked %s", self.config.role, sorted(tp.partition for tp in partitions))
        self._collect()
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

    def _drop(self, partitions: list[TopicPartition]) -> None:
        try:
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
