"""What the transactional worker loop does when its transaction fails: abort and re-run, or replace the producer.

Why in place, and not by exiting: a broker fault (the partition leader or the transaction coordinator killed,
paused, or out of disk) leaves many transactional producers in a fatal state (``_FENCED`` after the coordinator
timed their transaction out, ``INVALID_TXN_STATE`` after an abort that crossed a commit). Exiting cost a
restart, a consumer group that lost its partitions without a clean release, and so the crash guard's "an earlier
owner died": up to ``window`` messages of each partition run alone. The reward processor then waited longer
than its join deadline for the role. librdkafka's documented way out of a fatal error is a new producer
instance; nothing else of the process is broken, so the loop makes one and re-runs from the committed offsets.

Why the same transactional id: its ``init_transactions`` fences the dead producer's epoch and aborts its open
transaction at once (or waits for a commit already under way to end), so read_committed readers are not held
behind it until ``transaction.timeout.ms`` and the committed offsets read afterwards are the final ones. The id
is this process's own (``bus.instance``: host-pid-random; a restart is a new id). Zombies of the consumer side
are fenced by the group metadata the offsets are sent with (KIP-447), not by the id.

Why not on a group's fencing: ``ILLEGAL_GENERATION``, ``UNKNOWN_MEMBER_ID`` and ``FENCED_INSTANCE_ID`` mean the
group gave our partitions to another member; the transaction is aborted and the uncommitted work dropped (the
rebalance callbacks take the partitions away; the new owner re-runs it). The producer is replaced only if the
error left it unusable as well.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException, Producer

from bus.access import access_error
from bus.errors import KafkaClientError, from_exception
from workers.loop_config import WorkerConfig
from workers.retry import RetryPolicy

log = logging.getLogger("workers.transactional_loop")

#: The group took our partitions: the offsets of this transaction were refused for our stale membership.
GROUP_FENCING = frozenset({"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID"})


@dataclass(frozen=True, slots=True)
class Recovery:
    """What to do about a failed transaction: ``renew`` the producer (it is unusable) or only abort; whether
    the group fenced this member (its uncommitted work is the partitions' new owner's)."""

    renew: bool
    fenced_by_group: bool

    @property
    def why(self) -> str:
        if self.fenced_by_group:
            return "the group gave our partitions to another member: dropping the uncommitted work"
        if self.renew:
            return "the producer is unusable: replacing it and re-running the uncommitted work"
        return "aborting and re-running the uncommitted work"


def recovery_for(exc: KafkaClientError, *, abort_failed: bool = False) -> Recovery:
    """The recovery of a transaction that failed with ``exc`` (``abort_failed``: aborting it raised too)."""
    return Recovery(renew=exc.fatal or abort_failed, fenced_by_group=exc.code in GROUP_FENCING)


#: How a replacement producer's ``init_transactions`` is retried while the coordinator moves: ~1, 2, 4 s apart,
#: jittered (a broker fault makes every worker of the fleet renew at once; they should not ask in step).
RENEWAL_RETRY = RetryPolicy(attempts=4, backoff_s=1.0, backoff_max_s=4.0)


class ProducerRenewal:
    """Makes the replacement of a fatally failed transactional producer: ``factory`` builds one (the same
    config, the same transactional id), this initialises its transactions, retrying while the coordinator is
    being moved as ``retry`` says (then the failure ends the worker, as before: its supervisor)."""

    def __init__(
        self,
        factory: Callable[[], Producer],
        config: WorkerConfig,
        stop: threading.Event,
        *,
        retry: RetryPolicy = RENEWAL_RETRY,
    ) -> None:
        self.factory = factory
        self.config = config
        self.stop = stop
        self.retry = retry

    def __call__(self, old: Producer) -> Producer:
        """A new producer with its transactions initialised; ``old`` is purged (its queue holds only the failed
        transaction's messages) and dropped."""
        discard(old)
        cfg = self.config
        for attempt in self.retry.numbers():
            producer = self.factory()
            try:
                producer.init_transactions(cfg.kafka_timeout_s)
            except KafkaException as exc:
                cause = exc.args[0] if exc.args and isinstance(exc.args[0], LibKafkaError) else None
                if denied := access_error(cause, cfg.principal_config, resource=cfg.transactional_id):
                    raise denied from exc
                discard(producer)
                if not self.retry.again(attempt) or self.stop.is_set():
                    raise from_exception("init transactions of a new producer", exc) from exc
                delay = self.retry.delay(attempt)
                log.warning("%s: the new producer's init_transactions failed (attempt %d of %d), again in %.1fs: %s",
                            cfg.role, attempt, self.retry.attempts, delay, exc)  # fmt: skip
                self.stop.wait(delay)
                continue
            log.warning("%s: transactional producer %s replaced", cfg.role, cfg.transactional_id)
            return producer
        raise AssertionError("unreachable: the last attempt raises")


def discard(producer: Producer) -> None:
    """Drop what a failed producer still queues (never delivered outside its aborted transaction anyway)."""
    try:
        producer.purge(in_queue=True, in_flight=True, blocking=False)
        producer.poll(0)
    except (KafkaException, RuntimeError, TypeError) as exc:
        log.debug("purging a failed producer: %s", exc)
