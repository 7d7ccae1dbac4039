"""What the transactional loop holds between consuming a message and committing its result.

Per partition, messages wait in offset order until their outcome is known (and its uploads finished); only
the finished prefix is ever committed, so a crash never leaves a result whose input offset is uncommitted.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

from schemas.codec import Contract
from schemas.errors import RewardstreamError
from workers.handler import Done, Outcome

_EPOCHS = itertools.count(1)


def timestamp_ms(msg: Message) -> int:
    """The message's timestamp (the broker's on a ``LogAppendTime`` topic), 0 when it has none."""
    stamp_type, stamp = msg.timestamp()
    return stamp if stamp_type != TIMESTAMP_NOT_AVAILABLE and stamp > 0 else 0


@dataclass(eq=False)
class Item:
    """One consumed message on its way to a committed result."""

    part: PartitionState
    msg: Message
    offset: int
    key: bytes | None
    event: Contract | None = None
    outcome: Outcome | None = None
    attempts: int = 0
    #: Runs alone (a suspect message after an owner died, see ``bus.crash_guard``).
    alone: bool = False
    #: Its "running alone" mark is committed (a retry after a handler exception needs no new one).
    marked: bool = False

    def ready(self) -> bool:
        """Finished, with every upload done. An upload that failed after the store's own retries (an S3 outage
        longer than its deadline) stops the worker: nothing after it is committed, so it is all re-run later."""
        outcome = self.outcome
        if outcome is None:
            return False
        if isinstance(outcome, Done) and outcome.uploads:
            try:
                return outcome.ready()
            except RewardstreamError:
                raise
            except Exception as exc:
                raise RewardstreamError(
                    f"artifact upload failed: {exc}", topic=self.part.topic, partition=self.part.partition,
                    offset=self.offset,
                ) from exc  # fmt: skip
        return True


@dataclass(eq=False)
class PartitionState:
    """Per-assignment state of one partition; a new object per assignment, so stale results are dropped."""

    topic: str
    partition: int
    pending: dict[int, Item] = field(default_factory=dict)  # insertion order == offset order
    episodes: dict[bytes | None, deque[Item]] = field(default_factory=dict)
    next_offset: int | None = None
    live: bool = True
    #: Being revoked: runs already started may finish (``workers.rebalancing``); nothing of it starts anew.
    closing: bool = False
    #: Its items handed to the runners and not back yet.
    running: int = 0
    #: Unique per assignment (``PartitionListener``): runs of an earlier one carry an older epoch.
    epoch: int = field(default_factory=lambda: next(_EPOCHS))
    #: Event time this partition is read up to (``Timers``), ms.
    clock_ms: int = 0
    #: Where the partition started when assigned (its start mark: the committed offset, or the log start if
    #: none; -1 if the crash guard could not say): where ``Timers``' "read to the end" counts from.
    start_offset: int = -1

    def ready_count(self) -> int:
        """Length of the finished prefix."""
        count = 0
        for item in self.pending.values():
            if not item.ready():
                break
            count += 1
        return count

    def put_back(self, items: list[Item]) -> None:
        """Return ``items`` (its prefix, as ``take_ready`` gave it) to the front of ``pending``: their commit failed
        and they are to be committed again as they are, not re-run."""
        rest = dict(self.pending)
        self.pending.clear()
        self.pending.update({item.offset: item for item in items})
        self.pending.update(rest)

    def take_ready(self) -> list[Item]:
        """Remove and return the finished prefix, in offset order."""
        ready: list[Item] = []
        while self.pending:
            offset, item = next(iter(self.pending.items()))
            if not item.ready():
                break
            del self.pending[offset]
            ready.append(item)
        return ready
