"""The replay namespace: its own topic prefix (``<live prefix>replay.<replay id>.``), so the replay pipeline's
consumer groups, reward processor app id and topics are all its own and nothing is written to the live topics.

Here: naming, copying the selected generations in, and reading the replay's rewards out.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaException, TopicPartition

from bus.clients import make_producer
from bus.scan import scan_consumer
from schemas.codec import decode
from schemas.errors import KafkaError, RewardstreamError
from schemas.events import RewardEvent
from schemas.topics import catalog
from streams.replay.selection import SelectionError
from streams.replay.source import Selected

_REPLAY_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Kafka's limit on a topic name, and the longest suffix the pipeline adds to a prefix (the processor's changelog).
_TOPIC_MAX = 249
_PREFIX_MAX = 200  # the catalog's limit
_LONGEST_SUFFIX = len("rewards-reward-join-changelog") + 16


def new_replay_id() -> str:
    """A fresh id: UTC time (sortable, readable) and a random part."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def replay_prefix(live_prefix: str, replay_id: str) -> str:
    """``<live prefix>replay.<replay id>.``: valid for the catalog and short enough for every derived topic."""
    if not _REPLAY_ID.match(replay_id):
        raise SelectionError(f"replay id {replay_id!r} may only contain letters, digits, '_' and '-' (1-64)")
    prefix = f"{live_prefix}replay.{replay_id}."
    if len(prefix) > _PREFIX_MAX or len(prefix) + _LONGEST_SUFFIX > _TOPIC_MAX:
        raise SelectionError(f"replay topic prefix {prefix!r} is too long for Kafka topic names")
    catalog(prefix)  # raises ConfigError on characters a topic name may not have
    return prefix


class _Copier:
    """An idempotent producer of the selected generations' original keys and bytes into the replay topic."""

    def __init__(self, config: Mapping[str, str], topic: str) -> None:
        self.topic = topic
        self.failures: list[str] = []
        self._producer = make_producer(config)

    def _on_delivery(self, err: object, _msg: object) -> None:
        if err is not None:
            self.failures.append(str(err))

    def send(self, batch: Sequence[Selected]) -> None:
        try:
            for selected in batch:
                record = selected.record
                while True:
                    try:
                        self._producer.produce(
                            self.topic, key=record.key, value=record.value, on_delivery=self._on_delivery
                        )
                        break
                    except BufferError:
                        self._producer.poll(0.1)
            left = self._producer.flush(60)
        except KafkaException as exc:
            raise KafkaError(f"copying generations to {self.topic} failed: {exc}", topic=self.topic) from exc
        if left or self.failures:
            raise KafkaError(
                f"copying generations to {self.topic} failed: {left} undelivered; {self.failures[:3]}", topic=self.topic
            )


def _new_rewards(consumer: Consumer, topic: str, wanted: set[str], found: dict[str, RewardEvent]) -> bool:
    """Poll once; add the first reward of each wanted id to ``found``; True when something new came."""
    before = len(found)
    for msg in consumer.consume(1000, timeout=0.5):
        if msg.error() is not None:
            raise KafkaError(f"reading {topic} failed: {msg.error()}", topic=topic, partition=msg.partition())
        try:
            reward = decode(msg.value() or b"", RewardEvent)
        except RewardstreamError:
            continue
        if reward.generation_id in wanted and reward.generation_id not in found:
            found[reward.generation_id] = reward
    return len(found) > before


@dataclass(frozen=True, slots=True)
class Feed:
    """Where the replay feeds generations in and reads rewards out, and how fast."""

    generations_topic: str
    rewards_topic: str
    partitions: Sequence[int]
    #: At most this many generations without a reward at once: a backlog the replay itself created must not
    #: make the join's deadline (counted from the first part that arrived) fire before the slowest part.
    window: int = 64
    #: Give up when no new reward arrived for this long.
    idle_timeout_s: float = 300.0


def feed_and_collect(
    config: Mapping[str, str],
    feed: Feed,
    generations: Sequence[Selected],
    progress: Callable[[int], None] = lambda _n: None,
) -> dict[str, RewardEvent]:
    """Copy the generations into the replay namespace (windowed) and collect the first reward of each."""
    wanted = {s.event.generation_id for s in generations}
    found: dict[str, RewardEvent] = {}
    copier = _Copier(config, feed.generations_topic)
    consumer = scan_consumer(config)
    try:
        consumer.assign([TopicPartition(feed.rewards_topic, p, 0) for p in feed.partitions])
        sent = 0
        last_new = time.monotonic()
        while len(found) < len(wanted):
            room = len(found) + feed.window - sent
            if room > 0 and sent < len(generations):
                copier.send(generations[sent : sent + room])
                sent = min(len(generations), sent + room)
            if _new_rewards(consumer, feed.rewards_topic, wanted, found):
                last_new = time.monotonic()
            progress(len(found))
            if time.monotonic() - last_new > feed.idle_timeout_s:
                break
        return found
    except KafkaException as exc:
        raise KafkaError(f"reading {feed.rewards_topic} failed: {exc}", topic=feed.rewards_topic) from exc
    finally:
        consumer.close()
