"""What a role's handler sees and returns: the contract between a role and the transactional loop.

A handler turns one event (a generation, or an episode's action) into outputs to produce (``Done``) or a reason
it cannot be handled (``Reject``); outcomes of the candidate's code are values, never exceptions. It raises only
for failures worth retrying.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol, TypeVar

from confluent_kafka import TopicPartition

from schemas.codec import Contract, encode
from schemas.errors import RewardstreamError
from schemas.events import GenerationEvent, LogRecord, SandboxRun


class InvalidEventError(RewardstreamError):
    """A message decoded but cannot be processed (e.g. unknown task); it goes to the DLQ with this reason."""


class InfrastructureError(RewardstreamError):
    """The infrastructure failed while handling an event (a sandbox_error, an outage): not the event's fault.

    The worker loop retries it with capped backoff for as long as the worker runs and never dead-letters it
    (an event whose handler raises anything else is retried a few times, then dead-lettered as a crash)."""


class EmptyValueError(InvalidEventError):
    """A message without a value (a tombstone) on the generations topic."""


@dataclass(frozen=True, slots=True)
class Output:
    """One message a handler wants produced in the transaction that commits its input."""

    topic: str
    key: bytes | None
    #: None: a tombstone (a table's row deleted from its compacted changelog).
    value: bytes | None
    #: -1: the producer's partitioner; a table's changelog row names its input's partition (co-partitioned).
    partition: int = -1


@dataclass(frozen=True, slots=True)
class Done:
    """A generation was handled: its results, its log record, and a short status for metrics."""

    outputs: tuple[Output, ...]
    log: LogRecord | None = None
    status: str = "ok"
    #: Uploads (artifacts) the outputs refer to; the result is committed only once all of them finished.
    uploads: tuple[Future[object], ...] = ()
    #: The sandbox run the result reports, for the host's metrics (its wait for a CPU, its host retries).
    run: SandboxRun | None = None
    #: Called once the transaction holding the outputs committed (a role's own counters of what it recorded).
    committed: Callable[[], None] | None = None

    def ready(self) -> bool:
        """Whether every upload has finished (raises the first upload failure)."""
        for upload in self.uploads:
            if not upload.done():
                return False
            upload.result()
        return True


@dataclass(frozen=True, slots=True)
class Reject:
    """A message that cannot be handled (undecodable, invalid): it becomes a DeadLetter with ``error``."""

    error: BaseException
    #: What SREs find in OpenSearch about it (a handler crash's traceback, a crash loop), in the same transaction.
    log: LogRecord | None = None


Outcome = Done | Reject


@dataclass(frozen=True, slots=True)
class Source:
    """Where the event being handled was read from (for logs and errors). ``timestamp_ms``: the message's
    timestamp (0 if none); ``epoch``: which assignment of its partition it came in (see ``PartitionListener``)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int = 0
    epoch: int = 0


#: The event type a role consumes (``GenerationEvent`` for the one-shot roles, ``ActionEvent`` for episodes).
E_contra = TypeVar("E_contra", bound=Contract, contravariant=True)


class Handler(Protocol[E_contra]):
    """One role's work for one event. Must be thread-safe; outcomes of the code are values."""

    def handle(self, event: E_contra, source: Source) -> Outcome:
        """Run the event and say what to publish; raise only for failures worth retrying."""
        ...


class PartitionListener(Protocol):
    """A handler with per-partition state (the episode worker's table) hears of every (re)assignment.

    ``assigned`` runs in the loop before any message of that assignment is handled: after a rebalance and
    after an aborted transaction (its uncommitted work is re-run, so state must be the committed one again).
    Each assignment has a new ``epoch``: a run still going from an earlier one must not write its state."""

    def assigned(self, topic: str, partition: int, epoch: int) -> None: ...

    def revoked(self, topic: str, partition: int) -> None: ...


class ShareListener(Protocol):
    """Hears how many of its group's partitions (every topic the worker reads) this member owns, after every
    assignment change: its share of what the fleet does (``workers.sandbox.fleet_pace``)."""

    def owned(self, owned: int, total: int) -> None: ...


def encode_output(topic: str, event: GenerationEvent, result: Contract) -> Output:
    """An ``Output`` for a result event, keyed by the generation's episode (the join key)."""
    return Output(topic, event.key(), encode(result))


class Ends(Protocol):
    """Where partitions end now (``bus.ends.EndOffsets``): how ``Timers``' clocks know a partition is read to
    its end. One request for all of them, never on the consumer's own connection (it would wait behind the
    consumer's fetches)."""

    def ends(self, partitions: Sequence[TopicPartition], timeout_s: float) -> dict[tuple[str, int], int]: ...


class Timers(Protocol):
    """A handler whose state expires without any input (the episode worker's idle and overdue episodes).

    Time is event time: ``clock_ms`` is how far the loop has read the partition (its last message's
    timestamp, or the broker's ``now_ms`` once it is read to the end), so a message that came in time is never
    outrun by a timer. ``busy`` are the keys with a message not yet handled: theirs is decided by it.
    ``expire`` runs in the loop thread; its outputs are committed in one transaction."""

    def now_ms(self) -> int:
        """The broker's clock now (raises ``RewardstreamError`` when it cannot be read)."""
        ...

    def expire(
        self, topic: str, partition: int, epoch: int, clock_ms: int, busy: Collection[bytes | None]
    ) -> Sequence[Output]: ...
