"""The replay namespace: its own topic prefix (``<live prefix>replay.<replay id>.``), so the replay pipeline's
consumer groups, Faust app id and topics are all its own and nothing is written to the live topics.

Here: naming, copying the selected generations in, and reading the replay's rewards out.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from confluent_kafka import KafkaException, Producer, TopicPartition

from schemas.codec import decode
from schemas.errors import KafkaError, RewardstreamError
from schemas.events import RewardEvent
from schemas.topics import catalog
from streams.replay.scan import scan_consumer
from streams.replay.selection import SelectionError
from streams.replay.source import Selected

_REPLAY_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Kafka's limit on a topic name, and the longest suffix the pipeline adds to a prefix (Faust's changelog).
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


def copy_generations(config: Mapping[str, str], topic: str, generations: Sequence[Selected]) -> None:
    """Produce each selected generation's original key and bytes to the replay's generations topic."""
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 5, "log_level": 3})
    try:
        for selected in generations:
            while True:
                try:
                    producer.produce(
                        topic, key=selected.record.key, value=selected.record.value, on_delivery=on_delivery
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        left = producer.flush(60)
    except KafkaException as exc:
        raise KafkaError(f"copying generations to {topic} failed: {exc}", topic=topic) from exc
    if left or failures:
        raise KafkaError(f"copying generations to {topic} failed: {left} undelivered; {failures[:3]}", topic=topic)


def collect_rewards(
    config: Mapping[str, str],
    topic: str,
    partitions: Sequence[int],
    generation_ids: set[str],
    *,
    timeout_s: float,
    progress: Callable[[int], None] = lambda _n: None,
) -> dict[str, RewardEvent]:
    """Read the replay's rewards topic (read_committed, from the start) until every id has one or time runs out."""
    found: dict[str, RewardEvent] = {}
    consumer = scan_consumer(config)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + timeout_s
        while len(found) < len(generation_ids) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is not None:
                    raise KafkaError(f"reading {topic} failed: {msg.error()}", topic=topic, partition=msg.partition())
                try:
                    reward = decode(msg.value() or b"", RewardEvent)
                except RewardstreamError:
                    continue
                if reward.generation_id in generation_ids and reward.generation_id not in found:
                    found[reward.generation_id] = reward
            progress(len(found))
        return found
    except KafkaException as exc:
        raise KafkaError(f"reading {topic} failed: {exc}", topic=topic) from exc
    finally:
        consumer.close()
