"""The crash-loop guard: a message that kills its consumer process again and again is dead-lettered.

A failure *while handling* a message is caught and dead-lettered by the consumer loop. This is for what no
``except`` catches (a segfault in a C extension, the OOM killer, an abort in librdkafka): the process dies,
its restarter (the supervisor, a Kubernetes Deployment, systemd) starts it again, it re-reads the same
uncommitted messages and dies again, forever. The evidence is kept where every owner of the partition can
read it, whatever machine it runs on: in the metadata of the partition's committed offset.

* When a process is assigned a partition it commits a *start mark* at the committed offset ``O``: "an
  owner is active here". Every commit of progress carries it on; only releasing the partition cleanly
  (revoke, shutdown) clears it. So a mark that a new owner finds means the previous owner died with the
  messages after ``O`` in flight.
* The partition is then *suspect* for ``window`` offsets from ``O``: each of its messages runs alone in the
  process (nothing else in flight), after a mark naming exactly that offset was committed (``alone``), and
  its result is committed before anything else starts.
* A message whose mark says the process died ``attempts`` times while it ran alone is dead-lettered without
  running it again (``CrashLoopError``), with a log line and a metric.
* A partition this process *lost* (its group session timed out, as while the group coordinator's broker fails
  over) and gets back with its own last mark still on it was not left by a death: that mark counts as a clean
  release. Any other owner in between would have committed marks of its own.

The guard only decides; the consumer loop commits the marks it returns (in a transaction, or plainly).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

from bus.errors import from_exception
from bus.partition_reader import settled_watermarks
from schemas.errors import RewardstreamError
from schemas.settings import WorkerSettings, defaults

log = logging.getLogger(__name__)

#: Deaths of a process while one message ran alone in it, before that message is dead-lettered unrun.
DEFAULT_ATTEMPTS = defaults(WorkerSettings).crash_attempts
#: The marks a partition remembers having committed (newest kept): only the last one that committed matters.
_ISSUED_KEPT = 64
_MARK = re.compile(r"^rs-guard/1 o=(\d+) n=(\d+) a=(\d+) u=(-?\d+)$")


class CrashLoopError(RewardstreamError):
    """The consumer process died each time it handled this message alone; it is dead-lettered unrun."""


@dataclass(frozen=True, slots=True)
class Mark:
    """What the committed offset's metadata says about the partition (``offset`` is the offset it is about)."""

    offset: int
    #: Owners in a row that were active at ``offset`` and did not release it (0: released cleanly).
    owners: int = 0
    #: Times the message at ``offset`` ran alone when its process died.
    alone: int = 0
    #: End (exclusive) of the suspect window, or -1.
    until: int = -1

    def encode(self) -> str:
        """The metadata string (small: Kafka caps offset metadata at 4 KiB by default)."""
        if self.owners == 0 and self.alone == 0 and self.until <= self.offset:
            return ""  # nothing to remember
        return f"rs-guard/1 o={self.offset} n={self.owners} a={self.alone} u={self.until}"

    @classmethod
    def parse(cls, metadata: str | None) -> Mark | None:
        """The mark in ``metadata``, or None (no mark, or written by something else)."""
        match = _MARK.match(metadata or "")
        if match is None:
            return None
        offset, owners, alone, until = (int(g) for g in match.groups())
        return cls(offset, owners, alone, until)


@dataclass(frozen=True, slots=True)
class Isolate:
    """Run the message alone, after committing ``mark`` at its offset."""

    mark: Mark


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Dead-letter the message without running it: ``error`` says why."""

    error: CrashLoopError


@dataclass(slots=True)
class _Partition:
    committed: int
    until: int
    alone: dict[int, int] = field(default_factory=dict)
    #: The metadata of each mark this process committed (or tried to) -> that mark as if the partition had been
    #: released cleanly there: what a lost partition's own mark means when it comes back.
    issued: dict[str, Mark] = field(default_factory=dict)

    def issue(self, mark: Mark, clean: Mark) -> Mark:
        """Remember ``mark`` (and its ``clean`` meaning); return it."""
        text = mark.encode()
        if text:
            self.issued.pop(text, None)
            self.issued[text] = clean
            if len(self.issued) > _ISSUED_KEPT:
                self.issued.pop(next(iter(self.issued)))
        return mark


@dataclass
class CrashGuard:
    """Per-process guard state over the partitions this process owns."""

    component: str
    attempts: int = DEFAULT_ATTEMPTS
    #: Offsets after a suspect start that run alone (the most a dead owner could have had in flight).
    window: int = 64
    _parts: dict[tuple[str, int], _Partition] = field(default_factory=dict)
    #: Partitions this process lost (not released): the marks it had issued on each.
    _lost: dict[tuple[str, int], dict[str, Mark]] = field(default_factory=dict)

    def assigned(self, topic: str, partition: int, committed: int, metadata: str | None) -> Mark:
        """Take over ``topic[partition]`` at ``committed``; return the start mark to commit before consuming."""
        ours = self._lost.pop((topic, partition), {}).get(metadata or "")
        found = ours if ours is not None else Mark.parse(metadata)
        prior = found if found is not None and found.offset == committed else Mark(committed)
        until = prior.until
        if prior.owners >= 1 and until <= committed:
            until = committed + self.window
        part = _Partition(committed, until, {committed: prior.alone} if prior.alone else {})
        self._parts[(topic, partition)] = part
        return part.issue(Mark(committed, prior.owners + 1, prior.alone, until),
                          Mark(committed, prior.owners, prior.alone, until))  # fmt: skip

    def released(self, topic: str, partition: int) -> Mark | None:
        """The partition is given up cleanly: the mark that says so (None if it was never assigned here)."""
        self._lost.pop((topic, partition), None)
        part = self._parts.pop((topic, partition), None)
        if part is None:
            return None
        return Mark(part.committed, 0, 0, part.until)

    def lost(self, topic: str, partition: int) -> None:
        """The partition was taken away uncleanly: forget it (its mark stays, as after a crash), but remember
        the marks this process left on it (``assigned``: getting it back under one of them is no death)."""
        part = self._parts.pop((topic, partition), None)
        if part is not None:
            self._lost[(topic, partition)] = part.issued

    def suspect(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the message at ``offset`` must run alone."""
        part = self._parts.get((topic, partition))
        return part is not None and offset < part.until

    def before_alone(self, topic: str, partition: int, offset: int) -> Isolate | GiveUp:
        """Decide for a suspect message whose earlier offsets are all committed."""
        part = self._parts[(topic, partition)]
        deaths = part.alone.get(offset, 0)
        if deaths >= self.attempts:
            return GiveUp(
                CrashLoopError(
                    f"{self.component} died {deaths} times while handling this message alone; "
                    "dead-lettered without running it again",
                    topic=topic,
                    partition=partition,
                    offset=offset,
                )
            )
        part.alone[offset] = deaths + 1
        part.committed = offset
        return Isolate(part.issue(Mark(offset, 0, deaths + 1, part.until), Mark(offset, 0, deaths, part.until)))

    def progress(self, topic: str, partition: int, next_offset: int) -> str:
        """The metadata to commit with ``next_offset``: this owner is still active (and the window, if any)."""
        part = self._parts.get((topic, partition))
        if part is None:
            return ""
        part.committed = next_offset
        part.alone.pop(next_offset - 1, None)
        return part.issue(Mark(next_offset, 1, 0, part.until), Mark(next_offset, 0, 0, part.until)).encode()


def start_marks(
    consumer: Consumer, guard: CrashGuard, partitions: list[TopicPartition], timeout_s: float
) -> list[TopicPartition]:
    """Register newly assigned ``partitions`` with ``guard``; the start marks to commit before consuming them.

    A partition the group never committed starts at its log start (``auto.offset.reset=earliest``). If the
    broker cannot say (e.g. a dead owner's transaction still pending past the timeout), the partitions go
    unguarded for this assignment, with a warning: the guard must never be what stops a consumer.
    """
    if not partitions:
        return []
    try:
        committed = consumer.committed(partitions, timeout=timeout_s)
    except KafkaException as exc:
        log.warning("%s: crash guard off for %s: %s", guard.component, partitions, from_exception("committed", exc))
        return []
    marks: list[TopicPartition] = []
    for tp in committed:
        offset = tp.offset
        if offset < 0:
            try:
                offset, _high = settled_watermarks(consumer, tp, time.monotonic() + timeout_s)
            except KafkaException as exc:
                log.warning("%s: crash guard off for %s[%d]: %s", guard.component, tp.topic, tp.partition,
                            from_exception("log start", exc))  # fmt: skip
                continue
        mark = guard.assigned(tp.topic, tp.partition, offset, tp.metadata)
        if mark.until > offset:
            log.warning(
                "%s: %s[%d]: an earlier owner died with offset %d on (%d owners in a row did not release it); "
                "messages up to offset %d run alone, and one that kills the process alone %d times is "
                "dead-lettered", guard.component, tp.topic, tp.partition, offset, mark.owners - 1, mark.until,
                guard.attempts,
            )  # fmt: skip
        marks.append(TopicPartition(tp.topic, tp.partition, offset, metadata=mark.encode()))
    return marks


def release_marks(guard: CrashGuard, partitions: list[TopicPartition]) -> list[TopicPartition]:
    """The marks that say ``partitions`` were given up cleanly (commit them while still owning them)."""
    released = []
    for tp in partitions:
        mark = guard.released(tp.topic, tp.partition)
        if mark is not None:
            released.append(TopicPartition(tp.topic, tp.partition, mark.offset, metadata=mark.encode()))
    return released


class AloneGate:
    """Many consumers of one process run together, or one runs alone: a suspect message needs the whole
    process to itself, or a death is not its fault. (The transactional loop and the reward engine are one
    consumer each and isolate within themselves; this is for several consumers sharing a process.)"""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._alone = False

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """Run beside the others (never beside a message that runs alone)."""
        with self._cond:
            self._cond.wait_for(lambda: not self._alone)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Run with nothing else running in the process."""
        with self._cond:
            self._cond.wait_for(lambda: not self._alone and self._shared == 0)
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._alone = False
                self._cond.notify_all()
