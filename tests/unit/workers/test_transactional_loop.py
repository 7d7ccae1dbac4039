"""The transactional worker loop against in-memory fakes of the consumer and producer (no Kafka).

What is pinned here: per-episode order, commit of the contiguous finished prefix only (with its results in
the same transaction), dead letters with the source coordinates, backpressure by pausing, drain on stop,
retries of failing handlers, and abort + rewind when a transaction fails.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException, TopicPartition

from bus.crash_guard import Mark
from bus.metrics import WorkerMetrics
from schemas.codec import decode, encode
from schemas.events import DeadLetter, GenerationEvent, LogRecord
from workers.handler import Done, InfrastructureError, InvalidEventError, Outcome, Output, Source
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

    def init_transactions(self, _timeout: float) -> None:
        pass

    def begin_transaction(self) -> None:
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
        assert self.open is not None, "produced outside a transaction"
        self.open.append((topic, key, value))
        self.timestamps[value] = timestamp

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], _meta: object, _timeout: float) -> None:
        self.offsets = offsets

    def commit_transaction(self, _timeout: float) -> None:
        assert self.open is not None
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
    log: dict[int, list[FakeMessage]], handler: Any, *, listener: Any = None, timers: Any = None, **config: Any
) -> tuple[TransactionalWorker[GenerationEvent], FakeConsumer, FakeProducer, threading.Event]:
    consumer = FakeConsumer(log)
    producer = FakeProducer(consumer)
    stop = threading.Event()
    cfg = WorkerConfig(role="executor", source_topic=TOPIC, dlq_topic="dlq", group_id="g", transactional_id="t",
                       commit_interval_s=0.01, poll_timeout_s=0.005, handler_backoff_s=0.01, **config)  # fmt: skip
    worker = TransactionalWorker(
        cfg, handler, consumer=consumer, producer=producer, metrics=WorkerMetrics("executor"), stop=stop,  # type: ignore[arg-type]
        shipper=LogShipper(producer, "logs", "executor", worker="test:1"),  # type: ignore[arg-type]
        listener=listener, timers=timers, ends=FakeEnds(consumer) if timers is not None else None,
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


def test_turns_of_one_episode_run_in_order_and_episodes_in_parallel() -> None:
    values = [(f"ep{e}".encode(), encode(event(f"e{e}t{t}", f"ep{e}", t))) for t in range(3) for e in range(2)]
    handler = Recorder({f"e{e}t{t}": 0.03 for e in range(2) for t in range(3)})
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler, concurrency=4)
    run_until(worker, stop, lambda: len(producer.results()) == 6)
    when = {(kind, gen): at for kind, gen, at in handler.events}
    for e in range(2):
        for t in range(2):
            assert when[("end", f"e{e}t{t}")] <= when[("start", f"e{e}t{t + 1}")], "turn started before the previous"
    assert when[("start", "e1t0")] < when[("end", "e0t0")], "different episodes should overlap"
    assert [v for _, _, v in producer.results()] == [f"e{e}t{t}".encode() for t in range(3) for e in range(2)]
    assert consumer.committed_offsets == {0: 6}


def test_only_the_finished_prefix_is_committed_with_its_results() -> None:
    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(4)]
    handler = Recorder({"g0": 0.3})
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler, concurrency=4)
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 4)
    # g1..g3 finished long before g0 but are committed (and produced) only together with it.
    assert producer.transactions[0][1] == {0: 4}
    assert [v for _, _, v in producer.results()] == [b"g0", b"g1", b"g2", b"g3"]


def test_results_carry_their_generations_timestamp() -> None:
    """The reward processor's deadlines run in generation time: results inherit the input's timestamp."""
    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(3)]
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, Recorder({}), concurrency=2)
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 3)
    assert [producer.timestamps[v] for _, _, v in producer.results()] == [1_700_000_000_000 + i for i in range(3)]


def test_undecodable_and_invalid_events_become_dead_letters_with_their_source() -> None:
    class Picky(Recorder):
        def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
            if ev.generation_id == "bad":
                raise InvalidEventError("no task 'T/1' in the registry")
            return super().handle(ev, source)

    values = [(b"a", encode(event("ok1"))), (b"b", b"{not json"), (b"c", None), (b"d", encode(event("bad"))),
              (b"e", encode(event("ok2")))]  # fmt: skip
    worker, consumer, producer, stop = make_worker({2: messages(2, values)}, Picky())
    run_until(worker, stop, lambda: consumer.committed_offsets.get(2) == 5)
    letters = [decode(v, DeadLetter) for topic, _, v in producer.results() if topic == "dlq"]
    assert [(x.source_topic, x.source_partition, x.source_offset) for x in letters] == [
        (TOPIC, 2, 1), (TOPIC, 2, 2), (TOPIC, 2, 3)
    ]  # fmt: skip
    assert [x.error_type for x in letters] == ["DecodeError", "EmptyValueError", "InvalidEventError"]
    assert [x.original_key() for x in letters] == [b"b", b"c", b"d"]
    assert letters[0].payload() == b"{not json"
    assert [v for t, _, v in producer.results() if t == "out"] == [b"ok1", b"ok2"]
    assert worker.stats.dead_letters == 3
    assert worker.stats.results == 2


def test_backpressure_pauses_when_the_buffer_is_full_and_resumes() -> None:
    gate = threading.Event()
    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(20)]
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, Recorder(gate=gate), concurrency=1,
                                                   max_in_flight=4)  # fmt: skip
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while 0 not in consumer.paused:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert consumer.positions[0] <= 4, "consumed past the in-flight bound"
        gate.set()
        while consumer.committed_offsets.get(0) != 20:
            assert time.monotonic() < deadline + 5
            time.sleep(0.005)
        assert consumer.pause_calls >= 2
    finally:
        gate.set()
        stop.set()
        thread.join(10)
    assert [v for _, _, v in producer.results()] == [f"g{i}".encode() for i in range(20)]


def test_stop_drains_running_work_and_starts_nothing_new() -> None:
    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(6)]
    handler = Recorder({f"g{i}": 0.3 for i in range(6)})
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler, concurrency=2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    deadline = time.monotonic() + 5
    while sum(1 for kind, _, _ in handler.events if kind == "start") < 2:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    stop.set()
    thread.join(10)
    started = [g for kind, g, _ in handler.events if kind == "start"]
    assert started == ["g0", "g1"]
    assert consumer.committed_offsets == {0: 2}
    assert [v for _, _, v in producer.results()] == [b"g0", b"g1"]
    assert consumer.closed


def test_failing_handler_is_retried_then_dead_lettered() -> None:
    calls: list[str] = []

    class Flaky:
        def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
            calls.append(ev.generation_id)
            if ev.generation_id == "always" or calls.count(ev.generation_id) < 3:
                raise OSError("S3 down")
            return Done((Output("out", ev.key(), ev.generation_id.encode()),))

    values = [(b"a", encode(event("flaky"))), (b"b", encode(event("always")))]
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, Flaky(), handler_attempts=4)
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 2)
    assert calls.count("flaky") == 3
    assert calls.count("always") == 4
    topics = [t for t, _, _ in producer.results()]
    assert topics == ["out", "dlq", "logs"]  # the dead letter's log record carries the traceback
    record = decode(producer.results()[2][2], LogRecord)
    assert record.offset == 1
    assert record.exc_text is not None
    assert "OSError: S3 down" in record.exc_text


def test_an_infrastructure_failure_is_retried_past_every_attempt_and_never_dead_lettered() -> None:
    """A sandbox_error or an outage is not the event's fault: retried (capped backoff) for as long as the worker
    runs, never dead-lettered, the episode's next turn waiting for it, other episodes going on meanwhile."""
    calls: list[str] = []

    class Outage:
        def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
            calls.append(ev.generation_id)
            if ev.generation_id == "e0t0" and calls.count("e0t0") <= 9:  # far past handler_attempts
                raise InfrastructureError("sandbox_error: the fork server is gone")
            return Done((Output("out", ev.key(), ev.generation_id.encode()),))

    values = [(f"ep{e}".encode(), encode(event(f"e{e}t{t}", f"ep{e}", t))) for t in range(2) for e in range(2)]
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, Outage(), handler_attempts=3,
                                                   handler_backoff_max_s=0.02, concurrency=2)  # fmt: skip
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 4)
    assert calls.count("e0t0") == 10
    assert calls.index("e0t1") > max(i for i, c in enumerate(calls) if c == "e0t0"), "a turn ran before the last"
    assert calls.index("e1t1") < max(i for i, c in enumerate(calls) if c == "e0t0"), "the other episode waited"
    assert [v for t, _, v in producer.results() if t == "out"] == [b"e0t0", b"e1t0", b"e0t1", b"e1t1"]
    assert not [t for t, _, _ in producer.results() if t == "dlq"]
    assert worker.metrics.value("rewardstream_retries_total", dependency="infrastructure") == 9
    assert worker.metrics.value("rewardstream_dead_letters_total", reason="HandlerCrashError") == 0


def test_failed_transaction_is_aborted_and_the_work_rerun_from_committed_offsets() -> None:
    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(3)]
    handler = Recorder()
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler)
    producer.fail_next_commit = True
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 3)
    assert producer.aborted == 1
    assert worker.stats.aborted == 1
    assert sorted(v for _, _, v in producer.results()) == [b"g0", b"g1", b"g2"]  # each exactly once committed
    assert len([g for kind, g, _ in handler.events if kind == "start"]) > 3  # some ran again after the abort


def test_buffer_limit_defaults_to_sixteen_times_concurrency_at_least_64() -> None:
    cfg = WorkerConfig(role="r", source_topic="s", dlq_topic="d", group_id="g", transactional_id="t", concurrency=3)
    assert cfg.buffer_limit == 64
    assert WorkerConfig(role="r", source_topic="s", dlq_topic="d", group_id="g", transactional_id="t",
                        concurrency=8).buffer_limit == 128  # fmt: skip
    assert WorkerConfig(role="r", source_topic="s", dlq_topic="d", group_id="g", transactional_id="t",
                        max_in_flight=7).buffer_limit == 7  # fmt: skip


@pytest.mark.parametrize("value", [b"", b"\xff", b"[]"])
def test_garbage_never_reaches_the_handler(value: bytes) -> None:
    handler = Recorder()
    worker, consumer, producer, stop = make_worker({0: messages(0, [(b"k", value)])}, handler)
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 1)
    assert handler.events == []
    assert [t for t, _, _ in producer.results()] == ["dlq"]


def test_a_handler_crash_is_dead_lettered_with_the_reason_and_the_rest_flows() -> None:
    class Crashes:
        def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
            if ev.generation_id == "bad":
                raise ZeroDivisionError("division by zero in the handler")
            return Done((Output("out", ev.key(), ev.generation_id.encode()),))

    values = [(f"g{i}".encode(), encode(event("bad" if i == 2 else f"g{i}"))) for i in range(5)]
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, Crashes(), handler_attempts=2)
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 5)
    results = producer.results()
    assert [v for t, _, v in results if t == "out"] == [b"g0", b"g1", b"g3", b"g4"]
    letters = [decode(v, DeadLetter) for t, _, v in results if t == "dlq"]
    assert len(letters) == 1
    assert (letters[0].source_offset, letters[0].error_type) == (2, "HandlerCrashError")
    assert "handler crashed on all 2 attempts: ZeroDivisionError: division by zero in the handler" in letters[0].error
    assert worker.metrics.value("rewardstream_dead_letters_total", reason="HandlerCrashError") == 1


def test_after_an_owner_died_the_suspect_messages_run_alone_each_behind_its_own_mark() -> None:
    values = [(f"k{i}".encode(), encode(event(f"g{i}"))) for i in range(6)]
    handler = Recorder({f"g{i}": 0.02 for i in range(6)})
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler, concurrency=4, max_in_flight=4)
    consumer.committed_offsets[0] = 0
    consumer.committed_metadata[0] = Mark(0, 1).encode()  # the previous owner died with offset 0 on
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 6)
    spans = {g: (at, None) for kind, g, at in handler.events if kind == "start"}
    ends = {g: at for kind, g, at in handler.events if kind == "end"}
    order = sorted(spans, key=lambda g: spans[g][0])
    for earlier, later in itertools.pairwise(order[:4]):  # the window (buffer limit 4) runs one at a time
        assert ends[earlier] <= spans[later][0], f"{later} started while {earlier} ran"
    alone_marks = [tps[0] for tps in producer.marks if Mark.parse(tps[0].metadata) and tps[0].offset < 4]
    assert [Mark.parse(tp.metadata).alone for tp in alone_marks[1:]] == [1, 1, 1, 1]  # type: ignore[union-attr]
    assert [v for _, _, v in producer.results()] == [f"g{i}".encode() for i in range(6)]


def test_a_message_that_killed_the_process_alone_too_often_is_dead_lettered_unrun() -> None:
    values = [(f"k{i}".encode(), encode(event(f"g{i}"))) for i in range(4)]
    handler = Recorder()
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler, crash_attempts=3)
    consumer.committed_offsets[0] = 1
    consumer.committed_metadata[0] = Mark(1, 1, 3, 20).encode()  # offset 1 ran alone 3 times; all died
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 4)
    assert "g1" not in {g for _, g, _ in handler.events}
    results = producer.results()
    letters = [decode(v, DeadLetter) for t, _, v in results if t == "dlq"]
    assert [(d.source_offset, d.error_type) for d in letters] == [(1, "CrashLoopError")]
    assert "died 3 times while handling this message alone" in letters[0].error
    logs = [decode(v, LogRecord) for t, _, v in results if t == "logs"]
    assert any(
        r.message.startswith("dead-lettered (CrashLoopError): ") and r.offset == 1 and r.level == "error" for r in logs
    )
    assert [v for t, _, v in results if t == "out"] == [b"g2", b"g3"]
    assert worker.metrics.value("rewardstream_dead_letters_total", reason="CrashLoopError") == 1


@dataclass
class Expiring:
    """A handler with per-partition state and a timer: each key it handled expires once nothing of it waits."""

    epochs: list[tuple[int, int]] = field(default_factory=list)
    clocks: list[int] = field(default_factory=list)
    seen: set[bytes] = field(default_factory=set)
    expired: set[bytes] = field(default_factory=set)
    busy_seen: list[set[bytes | None]] = field(default_factory=list)

    def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
        assert (source.partition, source.epoch) in self.epochs, "a message ran before its partition was assigned"
        self.seen.add(ev.key())
        return Done((Output("out", ev.key(), ev.generation_id.encode()),))

    def assigned(self, _topic: str, partition: int, epoch: int) -> None:
        self.epochs.append((partition, epoch))

    def revoked(self, _topic: str, _partition: int) -> None:
        pass

    def now_ms(self) -> int:
        return 2_000_000_000_000

    def expire(
        self, _topic: str, _partition: int, _epoch: int, clock_ms: int, busy: Collection[bytes | None]
    ) -> list[Output]:
        self.clocks.append(clock_ms)
        self.busy_seen.append(set(busy))
        due = sorted(k for k in self.seen - self.expired if k not in busy)
        self.expired |= set(due)
        return [Output("timers", k, b"expired") for k in due]


def test_timers_run_on_the_partitions_clock_after_what_they_expire_and_commit_it() -> None:
    values = [(f"ep{e}".encode(), encode(event(f"e{e}t{t}", f"ep{e}", t))) for t in range(2) for e in range(3)]
    handler = Expiring()
    worker, _consumer, producer, stop = make_worker({0: messages(0, values)}, handler, listener=handler,
                                                    timers=handler, timer_interval_s=0.01)  # fmt: skip
    run_until(worker, stop, lambda: len(handler.expired) == 3 and len(producer.results()) == 9)
    assert [p for p, _ in handler.epochs] == [0]
    results = producer.results()
    for e in range(3):
        key = f"ep{e}".encode()
        done = max(i for i, (topic, k, _) in enumerate(results) if topic == "out" and k == key)
        timer = next(i for i, (topic, k, _) in enumerate(results) if topic == "timers" and k == key)
        assert done < timer, "a key expired before all of its messages were committed"
    assert handler.clocks[-1] == handler.now_ms(), "a partition read to its end is at the broker's now"
    assert all(c <= handler.now_ms() for c in handler.clocks)


def test_an_episode_with_a_result_not_yet_committed_is_busy_for_the_timers() -> None:
    """A finished run whose result waits behind an earlier offset still running is not answered yet (its trainer
    cannot see it): its episode is busy, so the timers never time it from before its answer is committed."""
    values = [(b"ep0", encode(event("slow", "ep0"))), (b"ep1", encode(event("quick", "ep1")))]
    gate = threading.Event()

    class Gated(Expiring):
        def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
            if ev.generation_id == "slow":
                gate.wait(10)
            return super().handle(ev, source)

    handler = Gated()
    worker, _consumer, producer, stop = make_worker({0: messages(0, values)}, handler, listener=handler,
                                                    timers=handler, timer_interval_s=0.01, concurrency=2)  # fmt: skip
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while b"ep1" not in handler.seen:
            assert time.monotonic() < deadline, "quick was not handled"
            time.sleep(0.01)
        seen_after = len(handler.busy_seen)
        while len(handler.busy_seen) < seen_after + 3:
            assert time.monotonic() < deadline, "no timer ticks"
            time.sleep(0.01)
        ticks = handler.busy_seen[seen_after:]  # while slow runs, quick's result waits behind it, uncommitted
        gate.set()
        while len(handler.expired) < 2:
            assert time.monotonic() < deadline, "nothing expired"
            time.sleep(0.01)
    finally:
        gate.set()
        stop.set()
        thread.join(10)
    results = producer.results()
    quick = next(i for i, (topic, k, _) in enumerate(results) if topic == "out" and k == b"ep1")
    timer = next(i for i, (topic, k, _) in enumerate(results) if topic == "timers" and k == b"ep1")
    assert quick < timer, f"ep1 expired before its answer was committed: {results}"
    assert all(b"ep1" in busy for busy in ticks), ticks


def test_an_aborted_transaction_reassigns_its_partitions_under_a_new_epoch() -> None:
    """The partition's state is restored again (its aborted writes are gone) before its messages re-run, and a
    run from the old assignment is told apart by its epoch."""
    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(3)]
    handler = Expiring()
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler, listener=handler)
    producer.fail_next_commit = True
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 3)
    assert producer.aborted == 1
    assert len(handler.epochs) == 2
    assert handler.epochs[0][1] != handler.epochs[1][1]
    assert sorted(v for _, _, v in producer.results()) == [b"g0", b"g1", b"g2"]


def test_a_partition_with_nothing_new_since_its_assignment_is_at_the_brokers_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a restart a partition whose every message was committed reads nothing: its clock is still the
    broker's now (librdkafka has no position before the first message), so its idle episodes still expire."""
    values = [(b"ep0", encode(event("g0", "ep0")))]
    handler = Expiring()
    worker, consumer, _producer, stop = make_worker({0: messages(0, values)}, handler, listener=handler,
                                                    timers=handler, timer_interval_s=0.01)  # fmt: skip
    consumer.committed_offsets[0] = 1
    monkeypatch.setattr(consumer, "position", lambda tps: [TopicPartition(tp.topic, tp.partition, -1001) for tp in tps])
    run_until(worker, stop, lambda: handler.now_ms() in handler.clocks)
    assert not handler.seen  # nothing was read: the clock moved all the same
