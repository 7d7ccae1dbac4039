"""The k8s e2e's Kafka cleanup on the real local broker: the reward processor's group and changelog (named by the
release, not by the run's topic prefix) go at the end of a run, and what a run that failed before its cleanup
left is swept at the start of the next."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bus.changelog import changelog_name
from infra.k8s.e2e_kafka import close_namespace, open_namespace, sweep_leftovers

pytestmark = pytest.mark.integration


def _commit(config: dict[str, str], group: str, topic: str) -> None:
    """Give ``group`` a committed offset (what a member leaves behind), without joining it."""
    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()


def _create(config: dict[str, str], *topics: str) -> None:
    admin = AdminClient(dict(config))  # kept: its futures fail once it is destroyed
    for future in admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in topics]).values():
        future.result(timeout=30)


def _left(config: dict[str, str], names: set[str]) -> set[str]:
    admin = AdminClient(dict(config))
    topics = set(admin.list_topics(timeout=30).topics)
    groups = {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}
    return names & (topics | groups)


def test_a_failed_runs_leftovers_are_swept(kafka_config: dict[str, str], unique_name: str) -> None:
    root, app = f"{unique_name}-e2e-", f"{unique_name}-rewards"
    stale = f"{root}dead1.generations"
    _create(kafka_config, stale, changelog_name(app))
    _commit(kafka_config, app, changelog_name(app))
    _commit(kafka_config, f"{root}dead1.executor", stale)
    _commit(kafka_config, f"{root}trainer.dead1", stale)
    made = {stale, changelog_name(app), app, f"{root}dead1.executor", f"{root}trainer.dead1"}
    assert _left(kafka_config, made) == made
    other, kept = f"{app}-other", f"{unique_name}-kept"  # a group whose id only starts like the app's is not his
    _create(kafka_config, kept)
    _commit(kafka_config, other, kept)  # (a group's offsets go with their topic: on one that stays)
    swept = sweep_leftovers(kafka_config, app, prefix_root=root, trainer_groups=f"{root}trainer.")
    assert set(swept) == made
    assert _left(kafka_config, made) == set()
    assert _left(kafka_config, {other}) == {other}
    admin = AdminClient(dict(kafka_config))
    admin.delete_consumer_groups([other])[other].result(timeout=30)
    admin.delete_topics([kept])[kept].result(timeout=30)


def test_a_run_deletes_the_reward_apps_group_and_changelog(kafka_config: dict[str, str], unique_name: str) -> None:
    app = f"{unique_name}-rewards"
    ns = open_namespace(kafka_config, f"{unique_name}-e2e-run.", 1, f"{unique_name}-run", app)
    _create(kafka_config, changelog_name(app))  # what the reward processor makes when it starts
    _commit(kafka_config, app, ns.topic("executions"))
    _commit(kafka_config, ns.topic("executor"), ns.topic("generations"))
    deleted = set(close_namespace(ns))
    assert {changelog_name(app), app, ns.topic("generations"), ns.topic("executor")} <= deleted
    assert _left(kafka_config, deleted) == set()
