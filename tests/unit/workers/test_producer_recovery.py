"""A worker whose transactional producer a broker fault left unusable recovers in place (no Kafka: the loop's
fakes): what is decided for which failure, the producer replaced with the loop going on, every result committed
exactly once, no crash guard run; only without a way to renew does the fault end the worker, as before."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException

from bus.errors import KafkaClientError
from schemas.codec import encode
from schemas.errors import KafkaError
from tests.unit.workers.loop_fakes import (
    FakeConsumer,
    FakeMessage,
    FakeProducer,
    Recorder,
    event,
    make_worker,
    messages,
    run_until,
)
from workers.loop_config import WorkerConfig
from workers.producer_recovery import ProducerRenewal, recovery_for
from workers.retry import RetryPolicy

CONFIG = WorkerConfig(role="executor", source_topic="gen", dlq_topic="dlq", group_id="g", transactional_id="t")


def _error(code: str, *, fatal: bool = False, abortable: bool = False) -> KafkaClientError:
    return KafkaClientError(f"commit transaction: {code}", code=code, fatal=fatal, txn_requires_abort=abortable)


@pytest.mark.parametrize(
    ("error", "renew", "fenced"),
    [
        (_error("_FENCED", fatal=True), True, False),  # the coordinator timed our transaction out
        (_error("INVALID_TXN_STATE", fatal=True), True, False),  # an abort crossed a commit on a new coordinator
        (_error("NOT_COORDINATOR", abortable=True), False, False),
        (_error("_TIMED_OUT"), False, False),
        (_error("ILLEGAL_GENERATION", abortable=True), False, True),  # the group gave our partitions away
        (_error("UNKNOWN_MEMBER_ID", abortable=True), False, True),
        (_error("FENCED_INSTANCE_ID", fatal=True), True, True),
    ],
)
def test_a_fatal_failure_renews_the_producer_and_only_the_group_fences(
    error: KafkaClientError, renew: bool, fenced: bool
) -> None:
    recovery = recovery_for(error)
    assert (recovery.renew, recovery.fenced_by_group) == (renew, fenced)


def test_a_failed_abort_renews_the_producer_whatever_failed_first() -> None:
    assert recovery_for(_error("_TIMED_OUT"), abort_failed=True).renew


def _generations(n: int) -> dict[int, list[FakeMessage]]:
    return {0: messages(0, [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(n)])}


class Renewals:
    """The loop's ``renew``: a fresh fake producer on the same consumer each time, all kept."""

    def __init__(self) -> None:
        self.consumer: FakeConsumer | None = None
        self.made: list[FakeProducer] = []

    def __call__(self) -> Any:
        assert self.consumer is not None
        self.made.append(FakeProducer(self.consumer))
        return self.made[-1]


def _fake(producer: object) -> Any:
    """A fake where a real ``Producer`` is expected."""
    return producer


def test_a_fatally_failed_producer_is_replaced_in_place_and_the_work_rerun_exactly_once() -> None:
    renewals = Renewals()
    worker, consumer, producer, stop = make_worker(_generations(4), Recorder(), renew=renewals)
    renewals.consumer, made = consumer, renewals.made
    producer.fatal_next_commit = True
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 4)
    assert len(made) == 1
    assert producer.purged
    assert _fake(worker.producer) is made[0]
    assert worker.stats.renewed == 1
    assert not producer.transactions  # the failed one never committed anything
    committed = [value for p in (producer, *made) for topic, _, value in p.results() if topic == "out"]
    assert sorted(committed) == [b"g0", b"g1", b"g2", b"g3"]  # each exactly once
    assert not made[0].marks  # no new assignment, no crash guard mark: nothing ran alone
    assert worker.stats.committed == 4


def test_a_producer_whose_abort_fails_is_replaced_too() -> None:
    renewals = Renewals()
    worker, consumer, producer, stop = make_worker(_generations(3), Recorder(), renew=renewals)
    renewals.consumer, made = consumer, renewals.made
    producer.fail_next_commit = True  # abortable
    producer.abort_fails = True
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 3)
    assert len(made) == 1
    assert worker.stats.renewed == 1
    assert sorted(v for _, _, v in made[0].results()) == [b"g0", b"g1", b"g2"]


def test_without_a_way_to_renew_a_fatal_failure_ends_the_worker() -> None:
    worker, _consumer, producer, stop = make_worker(_generations(2), Recorder())
    producer.fatal_next_commit = True
    failed: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except KafkaError as exc:
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    stop.set()
    assert failed
    assert "INVALID_TXN_STATE" in str(failed[0])


def test_the_replacement_waits_out_a_moving_coordinator_then_gives_up() -> None:
    consumer = FakeConsumer({})
    fakes = [FakeProducer(consumer, init_failures=2)]
    renewal = ProducerRenewal(lambda: _fake(fakes[-1]), CONFIG, threading.Event(),
                               retry=RetryPolicy(attempts=3, backoff_s=0.0, backoff_max_s=0.0))  # fmt: skip
    assert _fake(renewal(_fake(FakeProducer(consumer)))) is fakes[0]
    fakes.append(FakeProducer(consumer, init_failures=5))
    with pytest.raises(KafkaClientError, match="init transactions of a new producer"):
        renewal(_fake(FakeProducer(consumer)))


def test_a_refused_transactional_id_is_one_line_not_a_retry() -> None:
    class Refused(FakeProducer):
        def init_transactions(self, _timeout: float) -> None:
            code = LibKafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            raise KafkaException(LibKafkaError(code, "not authorized", fatal=True))

    consumer = FakeConsumer({})
    calls: list[Refused] = []

    def factory() -> Any:
        calls.append(Refused(consumer))
        return calls[-1]

    renewal = ProducerRenewal(factory, CONFIG, threading.Event())
    with pytest.raises(KafkaError, match="transactional id"):
        renewal(_fake(FakeProducer(consumer)))
    assert len(calls) == 1
