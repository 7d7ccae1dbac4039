"""The reward processor on Kafka transactions: exactly one reward per generation by construction.

Why not Faust's consumer: under at_least_once it drops or skips input after a rebalance or a recovery
(faust-streaming issues #221, #596 and #606, open), which our SIGKILL tests turned into generations that never
got a reward; its exactly_once mode has open bugs of its own. Here, as in Kafka Streams' exactly-once mode:

* inputs are read ``read_committed`` (a result from a worker's aborted transaction is never joined);
* each batch is one transaction holding the table's changelog writes, the rewards, dead letters, log records
  and the input offsets (``send_offsets_to_transaction`` with the group metadata, so a zombie is fenced);
  a crash aborts it all, and the next owner re-reads the inputs against the table as it was committed;
* the table lives in memory, restored from the compacted changelog (``read_committed``) when a partition is
  assigned; the range assignor gives one member the same partition of every input topic (co-partitioning).

Any Kafka error ends the process (exit 70) instead of being patched over: the in-memory table may hold writes
of the aborted transaction, and a restart rebuilds it from what was committed. The supervisor restarts it.

One message's failure is that message's: each is handled behind a savepoint (its table writes and the
records it produces are held back until it succeeded); if handling it raises, they are rolled back and the
message is dead-lettered as a handler crash in the same transaction as its offset. A message that kills the
process is caught by the crash guard (``bus.crash_guard``): after a death, suspect messages are handled
one per transaction, and one that kills the process alone N times is dead-lettered unhandled.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka import KafkaError as LibKafkaError

from bus.admin import ensure_topics
from bus.changelog import changelog_name, changelog_spec, restore_partition
from bus.crash_guard import DEFAULT_ATTEMPTS, CrashGuard, GiveUp, release_marks, start_marks
from bus.errors import KafkaClientError, from_message
from bus.metrics import WorkerMetrics
from bus.transaction import Transaction, commit_offsets
from schemas.errors import HandlerCrashError, KafkaUnavailableError
from schemas.settings import Settings
from schemas.signals import SIGNAL_TOPICS
from schemas.topics import Role, catalog_for, topic_for
from streams.reward.clients import engine_clients
from streams.reward.decided import DecidedReward
from streams.reward.integrity import IntegrityMetrics
from streams.reward.join import JoinState, Row, emitted, row_bytes
from streams.reward.liveness import WriterLiveness, settled_inputs
from streams.reward.policy import Policy
from streams.reward.processor import RESTART_EXIT_CODE, InputEnds, RewardProcessor, Topics

log = logging.getLogger("rewardstream.rewards")
#: How long a start retries a cluster that does not answer before exiting for a restart.
START_RETRY_S = 60.0
#: Allocations between the garbage collector's young-generation passes (CPython's default: 700).
GC_YOUNG_THRESHOLD = 50_000


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """Per-process knobs (the rest comes from Settings)."""

    app_id: str = "rewardstream-rewards"
    tick_s: float = 0.5
    #: Messages a transaction takes at most: each commit waits ~20 ms for the broker (offsets, end markers),
    #: which at 500 was a fifth of a backlog's drain time; at 2,000 a batch is still well under a second.
    batch_max: int = 2000
    poll_s: float = 0.05
    #: Bounds how long a killed processor's open transaction holds back read_committed readers.
    transaction_timeout_ms: int = 10_000
    #: Fault injection for crash tests: SIGKILL after the Nth reward is produced (inside its transaction).
    kill_after_rewards: int | None = None
    #: Deaths of the process while one message was handled alone before it is dead-lettered unhandled.
    crash_attempts: int = DEFAULT_ATTEMPTS


#: (topic, key, value, partition) of one record to produce; partition -1: by key.
_Record = tuple[str, bytes | None, bytes | None, int]


class _Savepoint:
    """What handling one message wrote, held back until it succeeded: records to produce, the table's prior
    values of the keys it changed. ``release`` produces the records; ``rollback`` restores the table."""

    def __init__(self, txn: Transaction) -> None:
        self._txn = txn
        self.records: list[_Record] = []
        self.prior: dict[str, tuple[Row | None, int | None]] = {}
        #: Rewards among the records (held back with them), then those released into the open transaction:
        #: counted in the integrity metrics once it commits.
        self.rewards: list[DecidedReward] = []
        self.released: list[DecidedReward] = []

    def produce(self, topic: str, key: bytes | None, value: bytes | None, partition: int = -1) -> None:
        self.records.append((topic, key, value, partition))

    def release(self) -> None:
        produce = self._txn.produce
        for topic, key, value, partition in self.records:
            produce(topic, key, value, partition=partition)
        self.records.clear()
        self.prior.clear()
        if self.rewards:
            self.released.extend(self.rewards)
            self.rewards.clear()


class _Table:
    """The processor's StateStore: a dict per owned partition; every write also goes to the changelog.

    A key's changelog record is produced once per transaction, its last value, when the transaction's work is
    done (``flush``): the transaction commits all of it or none, so no reader (a restore is read_committed)
    could see the values in between, and a generation whose parts meet in one batch costs one record, not
    three (most of them whole states with their parts in them)."""

    def __init__(self, stage: _Savepoint, txn: Transaction, topic: str) -> None:
        self._stage = stage
        self._txn = txn
        self._topic = topic
        self._partition_of: dict[str, int] = {}
        #: Rows: bytes as restored, or a state as the processor stored it (serialised by ``flush``).
        self._data: dict[str, Row] = {}
        #: Keys written in the open transaction -> their changelog partition.
        self._dirty: dict[str, int] = {}

    def load(self, partition: int, rows: Mapping[str, bytes]) -> None:
        """Restored rows, join states only. The Faust engine's watermarks ('#' keys: written by it, and by this
        engine before the emit-then-mark split) are its own and stay in the changelog; a row that is no join
        state is logged and left out, not parsed by every batch (a crash on each batch is a restart loop)."""
        for key, value in rows.items():
            if key.startswith("#"):
                continue
            try:
                JoinState.loads(value)
            except ValueError as exc:
                log.error("table partition %d: ignoring changelog row %r, not a join state: %s", partition, key, exc)
                continue
            self._data[key] = value
            self._partition_of[key] = partition

    def drop(self, partitions: set[int]) -> None:
        """Forget revoked partitions (between transactions: the consumer revokes inside ``consume``)."""
        gone = [k for k, p in self._partition_of.items() if p in partitions]
        for key in gone:
            del self._partition_of[key]
            self._data.pop(key, None)

    def get(self, key: str) -> Row | None:
        return self._data.get(key)

    async def put(self, partition: int, key: str, value: Row) -> None:
        self._remember(key)
        self._data[key] = value
        self._partition_of[key] = partition
        self._dirty[key] = partition

    async def delete(self, partition: int, key: str) -> None:
        self._remember(key)
        self._data.pop(key, None)
        self._partition_of.pop(key, None)
        self._dirty[key] = partition

    def _remember(self, key: str) -> None:
        if key not in self._stage.prior:
            self._stage.prior[key] = (self._data.get(key), self._partition_of.get(key))

    def flush(self) -> None:
        """Produce the changelog record of each key written in this transaction: its value now (a tombstone
        if deleted; after a rollback, the value restored, which the changelog has or is about to have). A
        finished state is kept as its bytes from then on (only pending ones are read as states again)."""
        for key, partition in self._dirty.items():
            row = self._data.get(key)
            value = None
            if row is not None:
                value = row_bytes(row)
                if isinstance(row, JoinState) and row.status != "pending":
                    self._data[key] = value
            self._txn.produce(self._topic, key.encode(), value, partition=partition)
        self._dirty.clear()

    def rollback(self) -> None:
        """Undo the writes of the savepoint (and drop its records): as if the message was never handled."""
        for key, (value, partition) in self._stage.prior.items():
            if value is None or partition is None:
                self._data.pop(key, None)
                self._partition_of.pop(key, None)
            else:
                self._data[key], self._partition_of[key] = value, partition
        self._stage.records.clear()
        self._stage.prior.clear()
        self._stage.rewards.clear()

    def items(self) -> Iterable[tuple[str, Row]]:
        return list(self._data.items())


class _Outputs:
    """The processor's Outputs: produced into the open transaction (acknowledged when it commits), a reward
    together with its marker."""

    def __init__(
        self,
        settings: Settings,
        options: EngineOptions,
        stage: _Savepoint,
        table: _Table,
        names: Mapping[str, str],
        *,
        liveness: WriterLiveness,
    ) -> None:
        self._stage = stage
        self._liveness = liveness
        self._table = table
        self._names = names
        self._client_config = settings.kafka_client_config()
        self._options = options
        self._sent = 0

    async def send_reward(self, state: JoinState, reward: DecidedReward) -> None:
        self._stage.produce(self._names["rewards"], reward.key(), reward.encode(), state.partition)
        self._stage.rewards.append(reward)
        self._sent += 1
        await self._table.put(state.partition, state.generation_id, emitted(state, reward.event_id, None).dumps())

    def kill_if_due(self, producer: Producer) -> None:
        """Fault injection: SIGKILL once the Nth reward is in the open transaction (the worst case for
        read_committed readers: on the broker, uncommitted)."""
        if self._options.kill_after_rewards is not None and self._sent >= self._options.kill_after_rewards:
            log.warning("fault injection: SIGKILL after reward %d, inside its transaction", self._sent)
            producer.flush(10)
            os.kill(os.getpid(), signal.SIGKILL)

    async def send_dlq(self, key: bytes | None, value: bytes) -> None:
        self._stage.produce(self._names["dlq"], key, value)

    async def send_log(self, key: bytes, value: bytes) -> None:
        self._stage.produce(self._names["logs"], key, value)

    async def caught_up(self, partitions: set[int], processed: Mapping[tuple[str, int], int]) -> InputEnds:
        inputs = [self._names[r] for r in SIGNAL_TOPICS]
        return await asyncio.to_thread(
            settled_inputs, self._liveness, self._options.app_id, inputs, partitions, processed
        )


class RewardEngine:
    """Consume, join and emit in transactions until ``stop`` is set (SIGTERM/SIGINT set it in ``run_engine``)."""

    def __init__(
        self, settings: Settings, policy: Policy, options: EngineOptions, metrics: WorkerMetrics | None = None
    ) -> None:
        self.settings = settings
        self.options = options
        specs = catalog_for(settings)
        roles: tuple[Role, ...] = (*SIGNAL_TOPICS, "rewards", "dlq", "logs")
        self.names: dict[str, str] = {role: topic_for(role, specs).name for role in roles}
        self.inputs = [self.names[r] for r in SIGNAL_TOPICS]
        self.changelog = changelog_name(options.app_id)
        self._changelog_spec = changelog_spec(options.app_id, topic_for("executions", specs))
        client = settings.kafka_client_config()
        self.consumer, self.producer = engine_clients(client, options.app_id, options.transaction_timeout_ms)
        self.txn = Transaction(self.producer, self.consumer, 30)
        self.stage = _Savepoint(self.txn)
        self.table = _Table(self.stage, self.txn, self.changelog)
        liveness = WriterLiveness.for_settings(settings, policy.join.deadline_s)
        self.outputs = _Outputs(settings, options, self.stage, self.table, self.names, liveness=liveness)
        self.processor = RewardProcessor(
            policy,
            Topics({name: role for role, name in self.names.items() if name in self.inputs}),
            self.table,
            self.outputs,
        )
        self.metrics = metrics or WorkerMetrics("rewards")
        self.processor.on_dead_letter = self.metrics.dead_letter
        self.processor.on_outcome = self.metrics.reward
        self.integrity = IntegrityMetrics(self.metrics.registry)
        self.guard = CrashGuard("rewards", attempts=options.crash_attempts, window=64)
        self.owned: set[int] = set()
        self.stop = threading.Event()
        self._loop = asyncio.new_event_loop()

    def run(self) -> None:
        """The consume-process-produce loop; returns after ``stop``, raises (or exits 70) on Kafka failures."""
        self._ensure_changelog()
        self.producer.init_transactions(30)
        self.consumer.subscribe(
            self.inputs, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        next_tick = time.monotonic() + self.options.tick_s
        try:
            while not self.stop.is_set():
                messages = self.consumer.consume(self.options.batch_max, timeout=self.options.poll_s)
                tick = time.monotonic() >= next_tick and bool(self.owned)
                if not messages and not tick:
                    continue
                batch: list[Message] = []
                for msg in messages:
                    if self._suspect(msg):  # an earlier owner died: alone, in a transaction of its own
                        self._transaction(batch, tick=False)
                        batch = []
                        self._alone(msg)
                    else:
                        batch.append(msg)
                self._transaction(batch, tick)
                if tick:
                    next_tick = time.monotonic() + self.options.tick_s
                    self.metrics.update_lag(self.consumer)
        finally:
            self._close()

    def _suspect(self, msg: Message) -> bool:
        return msg.error() is None and self.guard.suspect(msg.topic() or "", msg.partition() or 0, msg.offset() or 0)

    def _alone(self, msg: Message) -> None:
        """Handle a suspect message alone, behind a mark naming it; one that killed us too often is given up."""
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        decision = self.guard.before_alone(topic, partition, offset)
        if isinstance(decision, GiveUp):
            log.error("crash loop: %s", decision.error)
            self._transaction([msg], tick=False, give_up=decision)
            return
        mark = TopicPartition(topic, partition, offset, metadata=decision.mark.encode())
        commit_offsets(self.producer, self.consumer, [mark], 30)
        log.info("handling %s[%d]@%d alone (crash guard)", topic, partition, offset)
        self._transaction([msg], tick=False)

    def _transaction(self, messages: list[Message], tick: bool, give_up: GiveUp | None = None) -> None:
        if not messages and not tick:
            return
        offsets: dict[tuple[str, int], int] = {}
        try:
            self.txn.begin()
            self._run(self._process(messages, tick, give_up, offsets))
            self.stage.release()
            self.table.flush()
            self.outputs.kill_if_due(self.producer)
            for (topic, partition), offset in offsets.items():
                self.txn.offset(topic, partition, offset, self.guard.progress(topic, partition, offset))
            self.txn.commit()
            self.txn.tracker.raise_first()
            for reward in self.stage.released:
                self.integrity.observe(reward)
            self.stage.released.clear()
        except KafkaClientError as exc:
            _restart(f"a Kafka transaction failed ({exc}); the open one is aborted")
        except Exception:  # crash-only: a failure outside one message's handling (the tick, the table)
            log.exception("processing a batch failed")
            _restart("processing a batch failed")

    async def _process(
        self, messages: list[Message], tick: bool, give_up: GiveUp | None, offsets: dict[tuple[str, int], int]
    ) -> None:
        """A batch's messages, then the tick, in one run of the event loop (one run per message, each polling
        the loop's selector, cost a sixth of the processor's CPU); ``offsets``: the next offset of each input."""
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == LibKafkaError._PARTITION_EOF:
                    continue
                raise from_message("consume", msg)
            topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            if give_up is not None:
                await self.processor.dead_letter(topic, partition, offset, key=msg.key(), value=msg.value(),
                                                 error=give_up.error, crash=give_up.error)  # fmt: skip
            else:
                await self._handle(msg, topic, partition, offset)
            offsets[(topic, partition)] = offset + 1
        if tick:
            await self.processor.tick(set(self.owned))

    async def _handle(self, msg: Message, topic: str, partition: int, offset: int) -> None:
        """One input message behind a savepoint: on success its records go into the transaction; if handling
        it raises, its table writes are undone and it is dead-lettered (a bug must not stop the processor)."""
        _kind, stamp = msg.timestamp()
        try:
            await self.processor.handle(
                topic,
                partition,
                offset,
                timestamp=stamp / 1000.0 if stamp > 0 else time.time(),
                key=msg.key(),
                value=msg.value(),
            )
        except Exception as exc:
            self.table.rollback()
            error = HandlerCrashError(
                f"handler crashed: {type(exc).__name__}: {exc}", topic=topic, partition=partition, offset=offset
            )
            await self.processor.dead_letter(topic, partition, offset, key=msg.key(), value=msg.value(),
                                             error=error, crash=exc)  # fmt: skip
        self.stage.release()

    def _run(self, work: Any) -> None:
        self._loop.run_until_complete(work)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        marks = start_marks(consumer, self.guard, partitions, 30)
        commit_offsets(self.producer, consumer, marks, 30)
        numbers = {tp.partition for tp in partitions} - self.owned
        started = time.monotonic()
        for number in sorted(numbers):
            try:
                rows = restore_partition(self.settings.kafka_client_config(), self.changelog, number)
            except Exception as exc:  # nothing was processed yet for it: a restart is the clean retry
                _restart(f"restoring table partition {number} failed: {exc}")
            self.table.load(number, rows)
        self.owned |= {tp.partition for tp in partitions}
        self.processor.restart_progress_clock()
        log.info(
            "Setting newly assigned partitions %s: table restored (%d partitions) in %.1fs; inputs read_committed",
            sorted(self.owned),
            len(numbers),
            time.monotonic() - started,
        )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        commit_offsets(self.producer, consumer, release_marks(self.guard, partitions), 30)
        self._forget(partitions)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        numbers = {tp.partition for tp in partitions}
        self.owned -= numbers
        self.table.drop(numbers)
        self.processor.restart_progress_clock()
        log.info("partitions revoked: %s", sorted(numbers))

    def _ensure_changelog(self) -> None:
        """The changelog topic, created or checked. A cluster that just lost a node may not answer an admin
        request for a while (its controller or the topic's leader moving): retried for ``START_RETRY_S``, then
        the process exits 70 as on any Kafka failure, for its supervisor to start it again."""
        deadline = time.monotonic() + START_RETRY_S
        while True:
            try:
                ensure_topics([self._changelog_spec], self.settings.kafka_client_config())
                return
            except KafkaUnavailableError as exc:
                if self.stop.is_set():
                    raise
                if time.monotonic() >= deadline:
                    _restart(f"the cluster did not answer at start for {START_RETRY_S:.0f}s ({exc})")
                log.warning("%s; retrying", exc)
                self.stop.wait(2.0)

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.guard.lost(tp.topic, tp.partition)
        self._forget(partitions)

    def _close(self) -> None:
        try:
            self.consumer.close()
        except KafkaException as exc:
            log.warning("closing the consumer failed: %s", exc)
        self.producer.flush(10)
        self._loop.close()


def _restart(why: str) -> None:
    """Crash-only recovery: exit at once; the supervisor restarts the processor from committed state."""
    log.error("%s: exiting (code %d) so the supervisor restarts this processor", why, RESTART_EXIT_CODE)
    logging.shutdown()
    os._exit(RESTART_EXIT_CODE)


def run_engine(engine: RewardEngine) -> None:
    """Run until SIGTERM/SIGINT; the batch in progress commits first."""

    def stop(_signum: int, _frame: Any) -> None:
        engine.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tune_gc()
    engine.run()


def tune_gc() -> None:
    """Make the process's garbage collection cheap; it was 30% of the processor's CPU with a join table of
    20,000 pending states (a backlog whose executions run ahead of their verdicts). Every message allocates
    dozens of objects, so at CPython's default threshold a young pass ran every few messages, and each older
    pass walked the whole heap: the imported modules and every parsed state. Here the start-up heap is frozen
    (never walked again) and young passes run 70x less often. Only garbage in reference cycles waits for a
    pass (reference counting frees the rest at once): a little longer, for a few thousand messages."""
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
