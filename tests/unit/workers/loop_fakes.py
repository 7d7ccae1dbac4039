"""In-memory fakes of the consumer and producer for the transactional worker loop's unit tests (no Kafka),
and the helpers that drive a worker over them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException, TopicPartition

from bus.metrics import WorkerMetrics
from schemas.events import GenerationEvent
from workers.handler import Done, Outcome, Output, Source
from workers.logs.shipper import LogShipper
from workers.loop_config import WorkerConfig
from workers.transactional_loop import TransactionalWorker

TOPIC = "gen"


@dataclass
class FakeMessage:
    _topic: str
    _partition: int
    _offset: int
    _key: bytes | None
    _value: bytes | None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self.offset())  # TIMESTAMP_CREATE_TIME, ms

    def error(self) -> None:
        return None


@dataclass
class FakeConsumer:
    """One partition per key list; honours pause/resume/seek; assigns everything on the first consume."""

    log: dict[int, list[FakeMessage]]
    positions: dict[int, int] = field(default_factory=dict)
    committed_offsets: dict[int, int] = field(default_factory=dict)
    committed_metadata: dict[int, str] = field(default_factory=dict)
    paused: set[int] = field(default_factory=set)
    pause_calls: int = 0
    callbacks: dict[str, Callable[..., None]] = field(default_factory=dict)
    assigned: bool = False
    closed: bool = False
    #: The topic's partitions in the group (this member's and others'): 0, those in ``log`` at the first lookup.
    partition_count: int = 0
    metadata_lookups: int = 0

    def subscribe(self, _topics: list[str], **callbacks: Callable[..., None]) -> None:
        self.callbacks = callbacks

    def consume(self, num_messages: int = 1, timeout: float = 0) -> list[FakeMessage]:
        if not self.assigned:
            self.assigned = True
            self.callbacks["on_assign"](self, [TopicPartition(TOPIC, p) for p in self.log])
        out: list[FakeMessage] = []
        for p, msgs in self.log.items():
            if p in self.paused:
                continue
            pos = self.positions.get(p, self.committed_offsets.get(p, 0))
            while pos < len(msgs) and len(out) < num_messages:
                out.append(msgs[pos])
                pos += 1
            self.positions[p] = pos
        if not out:
            time.sleep(min(timeout, 0.005))
        return out

    def poll(self, timeout: float = 0) -> FakeMessage | None:
        got = self.consume(1, timeout)
        return got[0] if got else None

    def incremental_assign(self, _partitions: list[TopicPartition]) -> None:
        pass

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.pause_calls += 1
        self.paused |= {tp.partition for tp in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused -= {tp.partition for tp in partitions}

    def seek(self, tp: TopicPartition) -> None:
        self.positions[tp.partition] = max(tp.offset, 0)

    def committed(self, tps: list[TopicPartition], timeout: float = 0) -> list[TopicPartition]:
        return [
            TopicPartition(
                tp.topic,
                tp.partition,
                self.committed_offsets.get(tp.partition, -1001),
                metadata=self.committed_metadata.get(tp.partition, ""),
            )
            for tp in tps
        ]

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, p) for p in self.log]

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions.get(tp.partition, -1001)) for tp in tps]

    def get_watermark_offsets(self, tp: TopicPartition, **_kw: Any) -> tuple[int, int]:
        return 0, len(self.log[tp.partition])

    def consumer_group_metadata(self) -> object:
        return object()

    def list_topics(self, topic: str, timeout: float = 0) -> Any:
        self.metadata_lookups += 1
        self.partition_count = self.partition_count or len(self.log)
        meta = SimpleNamespace(partitions={p: None for p in range(self.partition_count)}, error=None)
        return SimpleNamespace(topics={topic: meta})

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeProducer:
    """Records what each committed transaction with results contained (offset-only ones, the crash guard's
    marks, in ``marks``); can be told to fail the next commit of results."""

    consumer: FakeConsumer
    open: list[tuple[str, bytes | None, bytes]] | None = None
    offsets: list[TopicPartition] = field(default_factory=list)
    transactions: list[tuple[list[tuple[str, bytes | None, bytes]], dict[int, int]]] = field(default_factory=list)
    fail_next_commit: bool = False
    aborted: int = 0
    timestamps: dict[bytes, int] = field(default_factory=dict)
    marks: list[list[TopicPartition]] = field(default_factory=list)
    #: The next commit of results fails with a fatal error (as after a broker fault): the producer is dead.
    fatal_next_commit: bool = False
    #: Aborting fails (with a fatal error) once the producer is dead, or always when set.
    abort_fails: bool = False
    #: init_transactions fails this many times (the coordinator being moved) before it works.
    init_failures: int = 0
    dead: bool = False
    purged: bool = False
    #: The next commits of results this many times are refused as the group's generation moved on under them.
    group_fenced_commits: int = 0

    def init_transactions(self, _timeout: float) -> None:
        if self.init_failures:
            self.init_failures -= 1
            raise KafkaException(LibKafkaError(LibKafkaError._TIMED_OUT, "coordinator moving", retriable=True))

    def _alive(self) -> None:
        if self.dead:
            raise KafkaException(LibKafkaError(LibKafkaError._FENCED, "producer fenced", fatal=True))

    def purge(self, **_kw: bool) -> None:
        self.purged = True

    def begin_transaction(self) -> None:
        self._alive()
        assert self.open is None
        self.open = []

    def produce(
        self,
        topic: str,
        key: bytes | None = None,
        value: bytes = b"",
        *,
        on_delivery: Any = None,
        timestamp: int = 0,
        partition: int = -1,
    ) -> None:
        self._alive()
        assert self.open is not None, "produced outside a transaction"
        self.open.append((topic, key, value))
        self.timestamps[value] = timestamp

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], _meta: object, _timeout: float) -> None:
        self.offsets = offsets

    def commit_transaction(self, _timeout: float) -> None:
        self._alive()
        assert self.open is not None
        if self.fatal_next_commit and self.open:
            self.fatal_next_commit, self.dead = False, True
            raise KafkaException(LibKafkaError(LibKafkaError.INVALID_TXN_STATE, "invalid txn state", fatal=True))
        if self.group_fenced_commits and self.open:
            self.group_fenced_commits -= 1
            code = LibKafkaError.ILLEGAL_GENERATION
            raise KafkaException(LibKafkaError(code, "generation moved on", txn_requires_abort=True))
        if self.fail_next_commit and self.open:
            self.fail_next_commit = False
            raise KafkaException(LibKafkaError(LibKafkaError._FENCED, "fenced", txn_requires_abort=True))
        if self.open:
            self.transactions.append((self.open, {tp.partition: tp.offset for tp in self.offsets}))
        else:
            self.marks.append(list(self.offsets))
        for tp in self.offsets:
            self.consumer.committed_offsets[tp.partition] = tp.offset
            self.consumer.committed_metadata[tp.partition] = tp.metadata or ""
        self.offsets = []
        self.open = None

    def abort_transaction(self, _timeout: float) -> None:
        if self.abort_fails:
            self.dead = True
        self._alive()
        self.aborted += 1
        self.open = None

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def results(self) -> list[tuple[str, bytes | None, bytes]]:
        return [out for outs, _ in self.transactions for out in outs]


def event(gen: str, episode: str | None = None, turn: int = 0) -> GenerationEvent:
    return GenerationEvent(generation_id=gen, episode_id=episode or gen, run_id="r", task_id="T/1",
                           policy_version="p", code="x = 1\n", turn=turn)  # fmt: skip


def messages(partition: int, values: Sequence[tuple[bytes | None, bytes | None]]) -> list[FakeMessage]:
    return [FakeMessage(TOPIC, partition, i, k, v) for i, (k, v) in enumerate(values)]


class Recorder:
    """A handler that logs start/end per generation and can be slowed per generation."""

    def __init__(self, delays: dict[str, float] | None = None, gate: threading.Event | None = None) -> None:
        self.delays = delays or {}
        self.gate = gate
        self.events: list[tuple[str, str, float]] = []
        self.lock = threading.Lock()

    def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
        with self.lock:
            self.events.append(("start", ev.generation_id, time.monotonic()))
        if self.gate is not None:
            self.gate.wait(10)
        time.sleep(self.delays.get(ev.generation_id, 0.0))
        with self.lock:
            self.events.append(("end", ev.generation_id, time.monotonic()))
        return Done((Output("out", ev.key(), ev.generation_id.encode()),))


class FakeEnds:
    """The fake log's ends, as ``bus.ends.EndOffsets`` gives a real topic's."""

    def __init__(self, consumer: FakeConsumer) -> None:
        self.consumer = consumer

    def ends(self, partitions: Sequence[TopicPartition], timeout_s: float) -> dict[tuple[str, int], int]:
        return {(tp.topic, tp.partition): len(self.consumer.log[tp.partition]) for tp in partitions}


def make_worker(
    log: dict[int, list[FakeMessage]],
    handler: Any,
    *,
    listener: Any = None,
    timers: Any = None,
    shares: Any = None,
    renew: Any = None,
    **config: Any,
) -> tuple[TransactionalWorker[GenerationEvent], FakeConsumer, FakeProducer, threading.Event]:
    consumer = FakeConsumer(log)
    producer = FakeProducer(consumer)
    stop = threading.Event()
    cfg = WorkerConfig(role="executor", source_topic=TOPIC, dlq_topic="dlq", group_id="g", transactional_id="t",
                       commit_interval_s=0.01, poll_timeout_s=0.005, handler_backoff_s=0.01, **config)  # fmt: skip
    worker = TransactionalWorker(
        cfg, handler, consumer=consumer, producer=producer, metrics=WorkerMetrics("executor"), stop=stop,  # type: ignore[arg-type]
        shipper=LogShipper(producer, "logs", "executor", worker="test:1"),  # type: ignore[arg-type]
        listener=listener, timers=timers, ends=FakeEnds(consumer) if timers is not None else None, shares=shares,
        renew=renew,
    )  # fmt: skip
    return worker, consumer, producer, stop


def run_until(
    worker: TransactionalWorker[GenerationEvent], stop: threading.Event, done: Callable[[], bool], timeout: float = 10
) -> None:
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "condition not reached"
            time.sleep(0.005)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
