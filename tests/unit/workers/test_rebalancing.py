"""The loop's incremental rebalancing (``workers.rebalancing``) on the fake consumer of the loop's unit tests:
only the revoked partitions are given up, their started runs get ``rebalance_drain_s`` to finish and commit,
nothing of theirs starts anew, and a run of a kept partition is never dropped. (Against the real broker, with
members joining and dying: ``tests/integration/test_rebalancing.py``.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaException, TopicPartition

from bus.config import RANGE
from schemas.codec import encode
from schemas.events import GenerationEvent
from tests.unit.workers.loop_fakes import (
    TOPIC,
    FakeConsumer,
    FakeMessage,
    Recorder,
    event,
    make_worker,
    messages,
    run_until,
)
from workers.handler import Done, Outcome, Output, Source
from workers.loop_config import WorkerConfig
from workers.transactional_loop import TransactionalWorker


@dataclass
class Revoker:
    """Calls ``on_revoke`` from the loop's own poll (as librdkafka does) once ``when()`` holds, then forgets
    the partitions (they are another member's now)."""

    consumer: FakeConsumer
    partitions: list[int]
    when: Callable[[], bool]
    took_s: float | None = None
    consume: Callable[..., list[FakeMessage]] = field(init=False)

    def __post_init__(self) -> None:
        self.consume = self.consumer.consume
        self.consumer.consume = self._consume  # type: ignore[method-assign]

    def _consume(self, num_messages: int = 1, timeout: float = 0) -> list[FakeMessage]:
        if self.took_s is None and self.consumer.assigned and self.when():
            began = time.monotonic()
            self.consumer.callbacks["on_revoke"](self.consumer, [TopicPartition(TOPIC, p) for p in self.partitions])
            self.took_s = time.monotonic() - began
            for p in self.partitions:
                del self.consumer.log[p]
        return self.consume(num_messages, timeout)


def started(handler: Recorder, gen: str) -> bool:
    return gen in ran(handler)


def ran(handler: Recorder) -> set[str]:
    with handler.lock:
        return {g for kind, g, _ in handler.events if kind == "start"}


def log_of(partition: int, gens: list[str], key: str | None = None) -> list[FakeMessage]:
    return messages(partition, [((key or g).encode(), encode(event(g, key or g))) for g in gens])


def test_a_revoked_partitions_started_run_finishes_and_commits_and_kept_ones_go_on() -> None:
    kept = threading.Event()  # holds the kept partition's run until the revoke is over

    class Handler(Recorder):
        def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
            if ev.generation_id != "k0":
                return super().handle(ev, source)
            with self.lock:
                self.events.append(("start", "k0", time.monotonic()))
            kept.wait(10)
            return Done((Output("out", ev.key(), b"k0"),))

    # p1: the episode's second turn waits behind the first (so it has not started when the revoke comes).
    handler = Handler({"r0": 0.2})
    log = {0: log_of(0, ["k0"]), 1: log_of(1, ["r0", "r1"], key="ep")}
    worker, consumer, producer, stop = make_worker(log, handler, concurrency=4, rebalance_drain_s=5.0)
    revoker = Revoker(consumer, [1], lambda: started(handler, "r0") and started(handler, "k0"))

    def done() -> bool:
        if revoker.took_s is not None:
            kept.set()
        return consumer.committed_offsets.get(0) == 1

    run_until(worker, stop, done)
    assert revoker.took_s is not None
    assert revoker.took_s < 5.0, "the revoke waited for r0 only"
    assert ran(handler) == {"k0", "r0"}, "r1 of the revoked partition must not start"
    assert consumer.committed_offsets[1] == 1, "r0 finished inside the drain: committed before giving p1 up"
    assert sorted(v for _, _, v in producer.results()) == [b"k0", b"r0"], "the kept partition's run was dropped"


def test_a_run_slower_than_the_drain_is_dropped_uncommitted_for_the_next_owner() -> None:
    release = threading.Event()
    handler = Recorder(gate=release)
    log = {0: log_of(0, ["slow"])}
    worker, consumer, producer, stop = make_worker(log, handler, concurrency=2, rebalance_drain_s=0.2)
    revoker = Revoker(consumer, [0], lambda: started(handler, "slow"))

    def done() -> bool:
        if revoker.took_s is not None:
            release.set()
        return revoker.took_s is not None and len(handler.events) == 2

    run_until(worker, stop, done)
    assert revoker.took_s is not None
    assert 0.15 < revoker.took_s < 2.0, "waited the drain, no longer"
    assert 0 not in {tp for _, offsets in producer.transactions for tp in offsets}, "nothing of p0 committed"
    assert producer.results() == [], "the late result of a revoked partition is discarded"


def test_items_handed_to_the_runners_but_not_started_are_left_for_the_next_owner() -> None:
    handler = Recorder({"a": 0.3})
    log = {0: log_of(0, ["a", "b", "c", "d"])}  # four episodes, one runner: b, c, d wait in the runners' queue
    worker, consumer, producer, stop = make_worker(log, handler, concurrency=1, rebalance_drain_s=5.0)
    revoker = Revoker(consumer, [0], lambda: started(handler, "a"))
    run_until(worker, stop, lambda: revoker.took_s is not None and consumer.committed_offsets.get(0) == 1)
    assert ran(handler) == {"a"}
    assert [v for _, _, v in producer.results()] == [b"a"]
    assert revoker.took_s is not None
    assert revoker.took_s < 2.0, "waited for a only, not for b, c, d"


def test_an_eager_worker_assigns_the_whole_assignment_and_still_drains_its_revoked_runs() -> None:
    assigned: list[str] = []

    class EagerConsumer(FakeConsumer):
        def assign(self, _partitions: list[TopicPartition]) -> None:
            assigned.append("assign")

        def incremental_assign(self, _partitions: list[TopicPartition]) -> None:
            raise AssertionError("an eager group must not assign incrementally")

    handler = Recorder({"a": 0.2})
    worker, consumer, producer, stop = make_worker({0: log_of(0, ["a"])}, handler, rebalance_drain_s=5.0,
                                                   assignment=RANGE)  # fmt: skip
    worker.consumer = EagerConsumer(consumer.log)  # type: ignore[assignment]
    producer.consumer = worker.consumer  # type: ignore[assignment]
    revoker = Revoker(worker.consumer, [0], lambda: started(handler, "a"))  # type: ignore[arg-type]
    run_until(worker, stop, lambda: revoker.took_s is not None)
    assert assigned == ["assign"]
    assert [v for _, _, v in producer.results()] == [b"a"], "the started run was drained and committed"


def test_a_worker_reading_several_topics_must_not_be_cooperative() -> None:
    with pytest.raises(ValueError, match="per-topic assignor"):
        TransactionalWorker(WorkerConfig(role="executor", source_topic=TOPIC, dlq_topic="d", group_id="g",
                                         transactional_id="t"), Recorder(), consumer=None, producer=None,  # type: ignore[arg-type]
                            metrics=None, stop=threading.Event(), shipper=None, models={"runs": GenerationEvent})  # type: ignore[arg-type]  # fmt: skip


@dataclass
class Shares:
    """Records each share the loop tells (``workers.sandbox.fleet_pace.FleetPace.owned``), with its time."""

    told: list[tuple[int, int, float]] = field(default_factory=list)

    def owned(self, owned: int, total: int) -> None:
        self.told.append((owned, total, time.monotonic()))


def test_the_share_of_the_partitions_is_told_on_assign_and_after_a_revokes_drain() -> None:
    handler = Recorder({"r0": 0.2})
    log = {0: log_of(0, ["k0"]), 1: log_of(1, ["r0"]), 2: log_of(2, ["k2"])}
    shares = Shares()
    worker, consumer, _producer, stop = make_worker(log, handler, shares=shares, concurrency=4, rebalance_drain_s=5.0)
    consumer.partition_count = 8  # the other five are other members'
    revoker = Revoker(consumer, [1], lambda: started(handler, "r0"))
    run_until(worker, stop, lambda: revoker.took_s is not None and len(shares.told) >= 2)
    assert [(owned, total) for owned, total, _ in shares.told[:2]] == [(3, 8), (2, 8)]
    r0_done = next(t for kind, g, t in handler.events if kind == "end" and g == "r0")
    assert shares.told[1][2] >= r0_done, "the share went down before the revoked partition's run was drained"
    assert consumer.metadata_lookups == 1, "the partition count is read once, not on every change"


def test_an_unreadable_partition_count_starts_nothing() -> None:
    shares = Shares()
    worker, consumer, _producer, stop = make_worker({0: log_of(0, ["a"])}, Recorder(), shares=shares)

    def broken(topic: str, timeout: float = 0) -> Any:
        raise KafkaException(f"metadata of {topic} down ({timeout} s)")

    consumer.list_topics = broken  # type: ignore[method-assign]
    run_until(worker, stop, lambda: bool(shares.told))
    assert shares.told[0][:2] == (0, 0)
