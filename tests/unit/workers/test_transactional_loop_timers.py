"""The transactional worker loop's timers on each partition's clock, and what an aborted transaction or an
idle partition leaves committed (in-memory fakes, no Kafka)."""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field

import pytest
from confluent_kafka import TopicPartition

from schemas.codec import encode
from schemas.events import GenerationEvent
from tests.unit.workers.loop_fakes import event, make_worker, messages, run_until
from workers.handler import Done, Outcome, Output, Source


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
