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
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka import KafkaError as LibKafkaError

from bus.admin import ensure_topics
from bus.changelog import changelog_name, changelog_spec, restore_partition
from bus.clients import consumer_config, producer_config
from schemas.codec import encode
from schemas.events import RewardEvent
from schemas.settings import Settings
from schemas.topics import catalog_for, topic_for
from streams.reward.join import JoinState, emitted
from streams.reward.policy import Policy
from streams.reward.processor import RESTART_EXIT_CODE, RewardProcessor, Topics
from streams.reward.rewards_log import idle_partitions

log = logging.getLogger("rewardstream.rewards")


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """Per-process knobs (the rest comes from Settings)."""

    app_id: str = "rewardstream-rewards"
    tick_s: float = 0.5
    batch_max: int = 500
    poll_s: float = 0.05
    #: Bounds how long a killed processor's open transaction holds back read_committed readers.
    transaction_timeout_ms: int = 10_000
    #: Fault injection for crash tests: SIGKILL after the Nth reward is produced (inside its transaction).
    kill_after_rewards: int | None = None


class _Table:
    """The processor's StateStore: a dict per owned partition; every write also goes to the changelog."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self._producer = producer
        self._topic = topic
        self._partition_of: dict[str, int] = {}
        self._data: dict[str, bytes] = {}

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
        gone = [k for k, p in self._partition_of.items() if p in partitions]
        for key in gone:
            del self._partition_of[key]
            self._data.pop(key, None)

    def get(self, key: str) -> bytes | None:
        return self._data.get(key)

    async def put(self, partition: int, key: str, value: bytes) -> None:
        self._data[key] = value
        self._partition_of[key] = partition
        self._producer.produce(self._topic, key=key.encode(), value=value, partition=partition)

    async def delete(self, partition: int, key: str) -> None:
        self._data.pop(key, None)
        self._partition_of.pop(key, None)
        self._producer.produce(self._topic, key=key.encode(), value=None, partition=partition)

    def items(self) -> Iterable[tuple[str, bytes]]:
        return list(self._data.items())


class _Outputs:
    """The processor's Outputs: produced into the open transaction (acknowledged when it commits), a reward
    together with its marker."""

    def __init__(
        self, settings: Settings, options: EngineOptions, producer: Producer, table: _Table, names: Mapping[str, str]
    ) -> None:
        self._producer = producer
        self._table = table
        self._names = names
        self._client_config = settings.kafka_client_config()
        self._options = options
        self._sent = 0

    async def mark_sent(self, partition: int) -> None:
        """Nothing to mark: a reward and its marker commit in one transaction, or neither does."""

    async def send_reward(self, state: JoinState, reward: RewardEvent) -> None:
        self._producer.produce(
            self._names["rewards"], key=reward.key(), value=encode(reward), partition=state.partition
        )
        self._sent += 1
        if self._options.kill_after_rewards is not None and self._sent >= self._options.kill_after_rewards:
            log.warning("fault injection: SIGKILL after reward %d, inside its transaction", self._sent)
            self._producer.flush(10)  # on the broker, uncommitted: the worst case for read_committed readers
            os.kill(os.getpid(), signal.SIGKILL)
        await self._table.put(state.partition, state.generation_id, emitted(state, reward.event_id, None).dumps())

    async def send_dlq(self, key: bytes | None, value: bytes) -> None:
        self._producer.produce(self._names["dlq"], key=key, value=value)

    async def send_log(self, key: bytes, value: bytes) -> None:
        self._producer.produce(self._names["logs"], key=key, value=value)

    async def caught_up(self, partitions: set[int], processed: Mapping[tuple[str, int], int]) -> set[tuple[str, int]]:
        inputs = [self._names[r] for r in ("executions", "verdicts", "judgements")]
        return await asyncio.to_thread(
            idle_partitions, self._client_config, self._options.app_id, inputs, partitions, processed=processed
        )


class RewardEngine:
    """Consume, join and emit in transactions until ``stop`` is set (SIGTERM/SIGINT set it in ``run_engine``)."""

    def __init__(self, settings: Settings, policy: Policy, options: EngineOptions) -> None:
        self.settings = settings
        self.options = options
        specs = catalog_for(settings)
        self.names = {
            role: topic_for(role, specs).name
            for role in ("executions", "verdicts", "judgements", "rewards", "dlq", "logs")
        }
        self.inputs = [self.names[r] for r in ("executions", "verdicts", "judgements")]
        self.changelog = changelog_name(options.app_id)
        self._changelog_spec = changelog_spec(options.app_id, topic_for("executions", specs))
        client = settings.kafka_client_config()
        self.consumer = Consumer(consumer_config(client, options.app_id, **{"partition.assignment.strategy": "range"}))
        transactional: dict[str, str | int | bool] = {
            "transactional.id": f"{options.app_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            "transaction.timeout.ms": options.transaction_timeout_ms,
            "linger.ms": 2,
        }
        self.producer = Producer(producer_config(client, **transactional))
        self.table = _Table(self.producer, self.changelog)
        self.processor = RewardProcessor(
            policy,
            Topics({name: role for role, name in self.names.items() if name in self.inputs}),
            self.table,
            _Outputs(settings, options, self.producer, self.table, self.names),
        )
        self.owned: set[int] = set()
        self.stop = threading.Event()
        self._loop = asyncio.new_event_loop()

    def run(self) -> None:
        """The consume-process-produce loop; returns after ``stop``, raises (or exits 70) on Kafka failures."""
        ensure_topics([self._changelog_spec], self.settings.kafka_client_config())
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
                self._transaction(messages, tick)
                if tick:
                    next_tick = time.monotonic() + self.options.tick_s
        finally:
            self._close()

    def _transaction(self, messages: list[Message], tick: bool) -> None:
        offsets: dict[tuple[str, int], int] = {}
        try:
            self.producer.begin_transaction()
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == LibKafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
                _kind, stamp = msg.timestamp()
                self._loop.run_until_complete(
                    self.processor.handle(
                        topic,
                        partition,
                        offset,
                        timestamp=stamp / 1000.0 if stamp > 0 else time.time(),
                        key=msg.key(),
                        value=msg.value(),
                    )
                )
                offsets[(topic, partition)] = offset + 1
            if tick:
                self._loop.run_until_complete(self.processor.tick(set(self.owned)))
            if offsets:
                self.producer.send_offsets_to_transaction(
                    [TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                    self.consumer.consumer_group_metadata(),
                    30,
                )
            self.producer.commit_transaction(30)
        except KafkaException as exc:
            _restart(f"a Kafka transaction failed ({exc}); the open one is aborted")
        except Exception:  # crash-only: the table may hold uncommitted writes; a restart re-reads the inputs
            log.exception("processing a batch failed")
            _restart("processing a batch failed")

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
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

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = {tp.partition for tp in partitions}
        self.owned -= numbers
        self.table.drop(numbers)
        self.processor.restart_progress_clock()
        log.info("partitions revoked: %s", sorted(numbers))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._on_revoke(consumer, partitions)

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
    engine.run()
