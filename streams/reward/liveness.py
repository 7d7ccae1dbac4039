"""Whether the role that writes a joined topic is behind or gone: a busy verifier is not a dead one.

The processor lets a reward out at the deadline without a part only when that part cannot come: its input
is read to the end and its writer has stopped. Reading to the end is not enough: under a backlog a verifier
works through other partitions for minutes while this one's verdicts topic stays quiet, and rewarding then
would score correct code 0.0 for the time it waited in the queue. So a writer counts as working on a
partition while its consumer group has generations of that partition left to finish and has committed
something (on any partition) within the quiet period; a stopped writer commits nothing, and after the quiet
period its parts are given up as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition

from bus.clients import make_reader
from schemas.errors import KafkaError
from schemas.kafka_acls import LIVENESS_GROUP
from schemas.settings import Settings
from schemas.topics import WRITER_ROLE, catalog_for, group_for, topic_for
from streams.reward.processor import InputEnds
from streams.reward.rewards_log import idle_partitions


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
    ) -> None:
        """``writers``: joined input topic -> the consumer group whose worker writes it."""
        self.client_config = dict(client_config)
        self._generations = generations_topic
        self._writers = dict(writers)
        self._quiet_s = quiet_s
        self._clock = clock
        self._timeout_s = timeout_s
        self._progress: dict[str, _Progress] = {}

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
        return left if now - seen.since < self._quiet_s else set()

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
