"""The e2e's own Kafka namespace on the local broker: topics under a prefix of its own (created before the chart
is installed, deleted after), the rewards topic read back whole, the executor group's lag, and the cleanup of
every group and topic it made.

The reward processor's app id is the release's (``e2e_chart.reward_app_id``, the chart's ``<release>-rewards``;
its group and changelog carry no topic prefix): they belong to the e2e's release alone, so the run deletes them
at its end, and at its start when a run that failed before its cleanup left them (with the topics and groups of
that run's prefix): a run never starts on an earlier run's join table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition
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
PREFIX_ROOT = "rs-e2e-"
"""Every run's topic prefix starts so (``rs-e2e-<tag>.``): what an earlier run left under it is swept."""
RUN_ROOT = "k8s-e2e-"
"""Every run's id starts so (``k8s-e2e-<tag>``); its trainer's group is ``rewardstream-trainer.<run id>``."""
TRAINER_GROUPS = f"rewardstream-trainer.{RUN_ROOT}"


@dataclass(frozen=True, slots=True)
class Namespace:
    """The run's topic prefix and the reward processor's app id (whose group and changelog the run deletes)."""

    config: Mapping[str, str]
    prefix: str
    partitions: int
    run_id: str
    reward_app: str

    def topic(self, role: str) -> str:
        return f"{self.prefix}{role}"


def open_namespace(config: Mapping[str, str], prefix: str, partitions: int, run_id: str, reward_app: str) -> Namespace:
    """Create every catalog topic under ``prefix`` (after ``sweep_leftovers``)."""
    ensure_topics(catalog(prefix, partitions, 1), config)
    return Namespace(config, prefix, partitions, run_id, reward_app)


def sweep_leftovers(
    config: Mapping[str, str], reward_app: str, prefix_root: str = PREFIX_ROOT, trainer_groups: str = TRAINER_GROUPS
) -> list[str]:
    """Delete the reward app's group and changelog, and every topic and group of an earlier run (under
    ``prefix_root``, trainers' under ``trainer_groups``); what was. Runs never overlap: one local cluster."""
    names = AdminClient(dict(config)).list_topics(timeout=30).topics
    topics = sorted(t for t in names if t.startswith(prefix_root) or t == changelog_name(reward_app))
    groups = _delete_groups(prefix_root, config) + _delete_groups(trainer_groups, config)
    groups += _delete_app_group(reward_app, config)
    delete_topics(topics, config)
    return [*topics, *groups]


def close_namespace(ns: Namespace) -> list[str]:
    """Delete the run's topics and consumer groups, the reward app's included; what was."""
    admin = AdminClient(dict(ns.config))
    names = admin.list_topics(timeout=30).topics
    topics = sorted(t for t in names if t.startswith(ns.prefix) or t == changelog_name(ns.reward_app))
    groups = _delete_groups(ns.prefix, ns.config)
    groups += _delete_groups(f"rewardstream-trainer.{ns.run_id}", ns.config)
    groups += _delete_app_group(ns.reward_app, ns.config)
    delete_topics(topics, ns.config)
    return [*topics, *groups]


def _delete_app_group(app: str, config: Mapping[str, str]) -> list[str]:
    """The reward app's group alone (a prefix would also take another app's whose id starts the same)."""

    def delete() -> list[str]:
        admin = AdminClient(dict(config))
        if app not in {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}:
            return []
        try:
            admin.delete_consumer_groups([app])[app].result(timeout=30)
        except KafkaException as exc:  # NON_EMPTY_GROUP is waited out
            raise KafkaError(f"deleting consumer group {app}: {exc}") from exc
        return [app]

    return _while_members_linger(delete)


def _delete_groups(prefix: str, config: Mapping[str, str]) -> list[str]:
    """Delete the groups under ``prefix``."""
    return _while_members_linger(lambda: delete_groups_with_prefix(prefix, config))


def _while_members_linger(delete: Callable[[], list[str]], timeout_s: float = GROUP_EXPIRY_S) -> list[str]:
    """``delete()``, again while the broker still counts a gone pod as a member (until its session times out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return delete()
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
