"""What a role's handler sees and returns: the contract between a role and the transactional loop.

A handler turns one generation into outputs to produce (``Done``) or a reason it cannot be handled (``Reject``);
outcomes of the candidate's code are values, never exceptions. It raises only for failures worth retrying.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from schemas.codec import Contract, encode
from schemas.errors import RewardstreamError
from schemas.events import GenerationEvent, LogRecord


class InvalidEventError(RewardstreamError):
    """A message decoded but cannot be processed (e.g. unknown task); it goes to the DLQ with this reason."""


class EmptyValueError(InvalidEventError):
    """A message without a value (a tombstone) on the generations topic."""


@dataclass(frozen=True, slots=True)
class Output:
    """One message a handler wants produced in the transaction that commits its input."""

    topic: str
    key: bytes | None
    value: bytes


@dataclass(frozen=True, slots=True)
class Done:
    """A generation was handled: its results, its log record, and a short status for metrics."""

    outputs: tuple[Output, ...]
    log: LogRecord | None = None
    status: str = "ok"
    #: Uploads (artifacts) the outputs refer to; the result is committed only once all of them finished.
    uploads: tuple[Future[object], ...] = ()

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
    """Where the event being handled was read from (for logs and errors)."""

    topic: str
    partition: int
    offset: int


class Handler(Protocol):
    """One role's work for one generation. Must be thread-safe; outcomes of the code are values."""

    def handle(self, event: GenerationEvent, source: Source) -> Outcome:
        """Run the generation and say what to publish; raise only for failures worth retrying."""
        ...


def encode_output(topic: str, event: GenerationEvent, result: Contract) -> Output:
    """An ``Output`` for a result event, keyed by the generation's episode (the join key)."""
    return Output(topic, event.key(), encode(result))
