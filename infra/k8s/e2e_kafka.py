"""The e2e's own Kafka namespace on the local broker: topics under a prefix of its own (created before the chart
is installed, deleted after), the rewards topic read back whole, the executor group's lag, and the cleanup of
every group and topic it made.

The reward processor's app id is the chart's fixed ``rewardstream-rewards`` (its group and changelog carry no
topic prefix): they are deleted afterwards only when they did not exist before the run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from bus.admin import delete_groups_with_prefix, delete_topics, ensure_topics
from bus.changelog import changelog_name
from bus.scan import read_ranges, watermarks
from schemas.codec import decode
from schemas.errors import KafkaError
from schemas.events import RewardEvent
from schemas.topics import catalog

GROUP_EXPIRY_S = 90.0
"""Longer than a consumer's session timeout (45 s): a killed member is gone from its group by then."""
REWARD_APP = "rewardstream-rewards"
"""The app id the chart gives the reward processor (``_helpers.tpl``)."""


@dataclass(frozen=True, slots=True)
class Namespace:
    """The run's topic prefix and what existed before it (so cleanup removes only what the run made)."""

    config: Mapping[str, str]
    prefix: str
    partitions: int
    run_id: str
    app_existed: bool

    def topic(self, role: str) -> str:
        return f"{self.prefix}{role}"


def open_namespace(config: Mapping[str, str], prefix: str, partitions: int, run_id: str) -> Namespace:
    """Create every catalog topic under ``prefix``; note whether the reward app's changelog already exists."""
    existing = AdminClient(dict(config)).list_topics(timeout=30).topics
    ensure_topics(catalog(prefix, partitions, 1), config)
    return Namespace(config, prefix, partitions, run_id, app_existed=changelog_name(REWARD_APP) in existing)


def close_namespace(ns: Namespace) -> list[str]:
    """Delete the run's topics and consumer groups (and the reward app's if the run made them); what was."""
    admin = AdminClient(dict(ns.config))
    topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(ns.prefix)]
    groups = _delete_groups(ns.prefix, ns.config)
    groups += _delete_groups(f"rewardstream-trainer.{ns.run_id}", ns.config)
    if not ns.app_existed:
        topics.append(changelog_name(REWARD_APP))
        if REWARD_APP in {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}:
            admin.delete_consumer_groups([REWARD_APP])[REWARD_APP].result(timeout=30)
            groups.append(REWARD_APP)
    delete_topics(topics, ns.config)
    return [*topics, *groups]


def _delete_groups(prefix: str, config: Mapping[str, str], timeout_s: float = GROUP_EXPIRY_S) -> list[str]:
    """Delete the groups under ``prefix``, waiting while the broker still counts a gone pod as a member (until
    its session times out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return delete_groups_with_prefix(prefix, config)
        except KafkaError as exc:
            if "NON_EMPTY_GROUP" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(2.0)


def read_rewards(ns: Namespace) -> list[tuple[str, float]]:
    """(generation_id, reward) of every committed record of the rewards topic, in partition/offset order."""
    topic = ns.topic("rewards")
    ends = watermarks(ns.config, topic)
    out: list[tuple[str, float]] = []
    for record in read_ranges(ns.config, topic, ends):
        reward = decode(record.value, RewardEvent)
        out.append((reward.generation_id, reward.reward))
    return out


def group_lag(ns: Namespace, role: str, topic_role: str) -> int:
    """Records of ``<prefix><topic_role>`` the group ``<prefix><role>`` has not committed (from 0 when it never
    committed): the lag KEDA reads."""
    topic = ns.topic(topic_role)
    ends = watermarks(ns.config, topic)
    consumer = Consumer({**ns.config, "group.id": ns.topic(role), "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in sorted(ends)], timeout=30)
    finally:
        consumer.close()
    return sum(ends[tp.partition][1] - max(tp.offset, 0) for tp in committed)
