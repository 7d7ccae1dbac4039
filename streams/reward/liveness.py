"""Whether the role that writes a joined topic is behind or gone: a busy verifier is not a dead one.

The processor lets a reward out at the deadline without a part only when that part cannot come: its input
is read to the end and its writer has stopped. Reading to the end is not enough: under a backlog a verifier
works through other partitions for minutes while this one's verdicts topic stays quiet, and rewarding then
would score correct code 0.0 for the time it waited in the queue. So a writer counts as working on a
partition while its consumer group has generations of that partition left to finish and has committed
something (on any partition) within the quiet period; a stopped writer commits nothing, and after the quiet
period its parts are given up as before.

A writer recovering from a broker fault is neither: it commits nothing while its transaction fails, its producer
is replaced and its offsets are read again (``workers.producer_recovery``), or while its process restarts, and
that can outlast the quiet period (the join deadline). Scoring its generations then would give correct answers
0.0 for what the infrastructure did. So a group that still has members (a live or restarting worker: a dead
one's membership ends with its session, ``session.timeout.ms``) gets ``RECOVERY_S`` more before it counts as
stopped; a group without members (the role scaled to zero, or stopped) gets the quiet period alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition

from bus.admin import group_members
from bus.clients import make_reader
from schemas.errors import KafkaError
from schemas.kafka_acls import LIVENESS_GROUP
from schemas.settings import Settings
from schemas.topics import WRITER_ROLE, catalog_for, group_for, topic_for
from streams.reward.processor import InputEnds
from streams.reward.rewards_log import idle_partitions

#: How much longer than the quiet period a writer group with members may commit nothing before it counts as stopped:
#: a worker's recovery from a broker fault (a commit that fails or hangs, its producer's replacement, the re-read of
#: its committed offsets), or a restart. Not longer: a group whose last generation record is a transaction marker
#: it can never commit past looks "behind" for good, and a part that will not come would wait that long.
RECOVERY_S = 60.0


def still_working(silent_s: float, quiet_s: float, members: int | None) -> bool:
    """Whether a writer group that has generations left and committed nothing for ``silent_s`` is on its way:
    within the quiet period, or with ``members`` (None: unknown, as while the cluster cannot tell) within
    ``RECOVERY_S`` more."""
    if silent_s < quiet_s:
        return True
    return members != 0 and silent_s < quiet_s + RECOVERY_S


@dataclass(slots=True)
class _Progress:
    """A writer group's committed offsets summed over the generations partitions, and when that last grew."""

    total: int
    since: float


class WriterLiveness:
    """Tracks each writer group's progress across ticks (the state ``working`` needs to tell slow from gone)."""

    def __init__(
        self,
        client_config: Mapping[str, str],
        generations_topic: str,
        writers: Mapping[str, str],
        quiet_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = 10.0,
        members: Callable[[str], int | None] | None = None,
    ) -> None:
        """``writers``: joined input topic -> the consumer group whose worker writes it; ``members``: how many
        members a group has (None when unknown), read from the cluster unless given."""
        self.client_config = dict(client_config)
        self._generations = generations_topic
        self._writers = dict(writers)
        self._quiet_s = quiet_s
        self._clock = clock
        self._timeout_s = timeout_s
        self._progress: dict[str, _Progress] = {}
        self._members = members or (lambda group: group_members(self.client_config, group, self._timeout_s))

    def working(self, inputs: set[tuple[str, int]]) -> set[tuple[str, int]]:
        """Of ``inputs`` ((topic, partition)), those whose writer is still on its way to them."""
        groups = {self._writers[topic] for topic, _ in inputs if topic in self._writers}
        if not groups:
            return set()
        try:
            ends = self._ends()
            behind = {group: self._behind(group, ends) for group in sorted(groups)}
        except KafkaException as exc:
            raise KafkaError(f"reading the writers' progress on {self._generations} failed: {exc}") from exc
        return {
            (topic, partition)
            for topic, partition in inputs
            if (group := self._writers.get(topic)) is not None and partition in behind[group]
        }

    def _ends(self) -> dict[int, tuple[int, int]]:
        """partition -> (low, high) watermark of the generations topic."""
        reader = make_reader(self.client_config, LIVENESS_GROUP, **{"isolation.level": "read_uncommitted"})
        try:
            meta = reader.list_topics(self._generations, timeout=self._timeout_s).topics.get(self._generations)
            if meta is None or meta.error is not None:
                raise KafkaError(f"topic {self._generations} is not readable: {meta.error if meta else 'missing'}")
            return {
                p: reader.get_watermark_offsets(
                    TopicPartition(self._generations, p), timeout=self._timeout_s, cached=False
                )
                for p in sorted(meta.partitions)
            }
        finally:
            reader.close()

    def _behind(self, group: str, ends: Mapping[int, tuple[int, int]]) -> set[int]:
        """The partitions ``group`` has generations left on, if it committed within the quiet period; else none."""
        reader = make_reader(self.client_config, group)
        try:
            committed = reader.committed([TopicPartition(self._generations, p) for p in ends], timeout=self._timeout_s)
        finally:
            reader.close()
        done = {tp.partition: max(tp.offset, ends[tp.partition][0]) for tp in committed}
        left = {p for p, (_low, high) in ends.items() if done.get(p, high) < high}
        now = self._clock()
        total = sum(done.values())
        seen = self._progress.get(group)
        if seen is None or total != seen.total:
            self._progress[group] = seen = _Progress(total, now)
        silent_s = now - seen.since
        if not left or silent_s < self._quiet_s:
            return left
        return left if still_working(silent_s, self._quiet_s, self._members(group)) else set()

    @classmethod
    def for_settings(cls, settings: Settings, quiet_s: float) -> WriterLiveness:
        """The writers of the joined topics these settings name, read from the generations topic."""
        specs = catalog_for(settings)
        writers = {topic_for(topic, specs).name: group_for(settings, role) for topic, role in WRITER_ROLE.items()}
        return cls(settings.kafka_client_config(), topic_for("generations", specs).name, writers, quiet_s)


def settled_inputs(
    liveness: WriterLiveness,
    group_id: str,
    inputs: list[str],
    partitions: set[int],
    processed: Mapping[tuple[str, int], int],
) -> InputEnds:
    """The input (topic, partition)s ``group_id`` has read to the end, and of those the ones whose writer is not
    still coming.

    The writers are read first: a writer commits its results and its progress in one transaction, so one with
    nothing left here before the ends are read has every result of it below those ends (read the other way
    round, a verdict committed between the two reads would be given up as missing)."""
    working = liveness.working({(topic, p) for topic in inputs for p in partitions})
    read, ends = idle_partitions(liveness.client_config, group_id, inputs, partitions, processed=processed)
    return InputEnds(read=frozenset(read), settled=frozenset(read) - working, ends=ends)
