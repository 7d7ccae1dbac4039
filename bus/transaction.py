"""One Kafka transaction: what a batch produces and the input offsets it consumed, committed together or not
at all. The worker loop, the reward engine and the crash guard's marks all go through it.

The shape is confluent-kafka's ``examples/eos_transactions.py``, once::

    txn = Transaction(producer, consumer, timeout_s=30)
    txn.begin()
    txn.produce(topic, key, value)               # results, log records, dead letters, table writes
    txn.offset(topic, partition, next_offset)    # where each input partition continues
    txn.commit()                                 # offsets sent with the group metadata (a zombie is fenced)

A failure raises ``KafkaClientError``; ``txn_requires_abort`` says the caller may ``abort()`` and re-run from
the committed offsets, ``fatal`` that the producer is unusable (replace it, or restart the process).

A commit or abort that does not return within its timeout (plus ``HUNG_GRACE_S``) is fatal too: under a broker
killed in the chaos tests, librdkafka's ``send_offsets_to_transaction`` blocked for minutes past its timeout
and the whole worker with it. The call runs on a thread of its own; when it hangs, the caller gets the error and
replaces the producer (a new one with the same transactional id fences the hung one, whose call then fails).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from bus.delivery import DeliveryTracker, produce
from bus.errors import KafkaClientError, from_exception

log = logging.getLogger(__name__)

#: Past its own timeout, how long a transactional call may take before its producer counts as hung.
HUNG_GRACE_S = 10.0


class Transaction:
    """Produce and commit offsets atomically; reusable (``begin`` again after ``commit`` or ``abort``)."""

    def __init__(
        self, producer: Producer, consumer: Consumer, timeout_s: float, tracker: DeliveryTracker | None = None
    ) -> None:
        self.producer = producer
        self.consumer = consumer
        self.timeout_s = timeout_s
        self.tracker = tracker or DeliveryTracker()
        self._offsets: dict[tuple[str, int], TopicPartition] = {}

    def begin(self) -> None:
        """Open the transaction (after ``init_transactions``, once per producer)."""
        self._offsets = {}
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            raise from_exception("begin transaction", exc) from exc

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, *, partition: int = -1, timestamp_ms: int = 0
    ) -> None:
        """Queue a message into the open transaction (a full local queue is waited out)."""
        produce(self.producer, topic, key=key, value=value, partition=partition, timestamp_ms=timestamp_ms,
                on_delivery=self.tracker.callback)  # fmt: skip

    def offset(self, topic: str, partition: int, next_offset: int, metadata: str = "") -> None:
        """Commit ``next_offset`` (and ``metadata``) for an input partition with the transaction."""
        self._offsets[(topic, partition)] = TopicPartition(topic, partition, next_offset, metadata=metadata)

    def commit(self) -> None:
        """Send the offsets and commit (a message that failed delivery is in ``tracker``: raise it after)."""
        offsets, metadata = list(self._offsets.values()), self.consumer.consumer_group_metadata()

        def commit() -> None:
            if offsets:
                self.producer.send_offsets_to_transaction(offsets, metadata, self.timeout_s)
            self.producer.commit_transaction(self.timeout_s)

        try:
            bounded("commit transaction", commit, self.timeout_s)
        except KafkaException as exc:
            raise from_exception("commit transaction", exc) from exc

    def abort(self) -> None:
        """Abort the open transaction: nothing it produced is ever read_committed, no offset moved."""
        try:
            bounded("abort transaction", lambda: self.producer.abort_transaction(self.timeout_s), self.timeout_s)
        except KafkaException as exc:
            raise from_exception("abort transaction", exc) from exc


def bounded(what: str, call: Callable[[], None], timeout_s: float) -> None:
    """``call()`` (a transactional call given ``timeout_s``), raising what it raises; if it has not returned
    ``HUNG_GRACE_S`` after its timeout, a fatal ``KafkaClientError`` (the call is left to fail on its daemon
    thread once its producer is fenced)."""
    done = threading.Event()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the caller's thread
            raised.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"kafka-{what.replace(' ', '-')}", daemon=True).start()
    if not done.wait(timeout_s + HUNG_GRACE_S):
        log.error("%s: no answer from the producer %.0fs past its %.0fs timeout: it counts as hung", what,
                  HUNG_GRACE_S, timeout_s)  # fmt: skip
        raise KafkaClientError(f"{what}: the producer hung past its {timeout_s:.0f}s timeout", code="_TIMED_OUT",
                               fatal=True)  # fmt: skip
    if raised:
        raise raised[0]


def commit_offsets(producer: Producer, consumer: Consumer, offsets: list[TopicPartition], timeout_s: float) -> bool:
    """Commit ``offsets`` (with their metadata) in a transaction of their own; False if that failed.

    Best effort (the crash guard's marks): a failed mark weakens the guard for one assignment and is logged;
    it never stops the consumer (a rebalance in progress makes this fail; the next assignment marks again).
    """
    if not offsets:
        return True
    txn = Transaction(producer, consumer, timeout_s)
    try:
        txn.begin()
        for tp in offsets:
            txn.offset(tp.topic, tp.partition, tp.offset, tp.metadata or "")
        txn.commit()
    except Exception as exc:  # KafkaClientError; the guard must never be what stops a consumer
        log.warning("committing offsets %s failed: %s", [(tp.topic, tp.partition, tp.offset) for tp in offsets], exc)
        try:
            txn.abort()
        except Exception as again:
            log.warning("aborting that transaction failed too: %s", again)
        return False
    return True
