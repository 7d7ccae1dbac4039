"""Topic creation against the real Kafka: idempotent, and loud about differences. Unique prefixes per test."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus.admin import delete_groups_with_prefix, delete_topics, describe_topics, ensure_topics
from schemas.topics import catalog

pytestmark = pytest.mark.integration

CLI = str(Path(sys.executable).with_name("rewardstream"))


@pytest.fixture
def prefix(kafka_config: dict[str, str], unique_name: str) -> Iterator[str]:
    """A fresh topic prefix; every catalog topic under it is deleted after the test."""
    prefix = f"{unique_name}."
    try:
        yield prefix
    finally:
        delete_topics([s.name for s in catalog(prefix)], kafka_config)


def test_create_is_idempotent(kafka_config: dict[str, str], prefix: str) -> None:
    specs = catalog(prefix, partitions=2)
    first = ensure_topics(specs, kafka_config)
    assert [t.status for t in first.topics] == ["created"] * len(specs)
    second = ensure_topics(specs, kafka_config)
    assert [t.status for t in second.topics] == ["exists"] * len(specs)
    assert second.as_json()["ok"] is True
    existing = describe_topics([s.name for s in specs], kafka_config)
    for spec in specs:
        assert existing[spec.name].partitions == 2
        assert existing[spec.name].config["retention.ms"] == str(spec.retention_ms)
        assert existing[spec.name].config["cleanup.policy"] == "delete"


def test_wrong_partition_count_is_reported(kafka_config: dict[str, str], prefix: str) -> None:
    ensure_topics(catalog(prefix, partitions=2)[:1], kafka_config)
    report = ensure_topics(catalog(prefix, partitions=3), kafka_config)
    by_role = {t.role: t for t in report.topics}
    assert by_role["generations"].status == "differs"
    assert by_role["generations"].differences == ("has 2 partitions, catalog says 3",)
    assert all(t.status == "created" for t in report.topics if t.role != "generations")
    assert [t.name for t in report.differing] == [f"{prefix}generations"]


def test_cli_create_json_then_difference_exits_2(prefix: str) -> None:
    created = subprocess.run(
        [CLI, "topics", "create", "--json", "--prefix", prefix, "--partitions", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    report = json.loads(created.stdout)
    assert report["ok"] is True
    assert {t["status"] for t in report["topics"]} == {"created"}
    assert {t["name"] for t in report["topics"]} == {s.name for s in catalog(prefix)}

    differs = subprocess.run(
        [CLI, "topics", "create", "--prefix", prefix, "--partitions", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert differs.returncode == 2
    every = len(catalog(prefix))
    assert differs.stderr.startswith(f"rewardstream: error: {every} topic(s) differ from the catalog: ")
    assert f"{prefix}generations has 2 partitions, catalog says 3" in differs.stderr
    assert f"{prefix}rewards" in differs.stdout


def test_groups_under_a_prefix_are_deleted_and_a_second_delete_is_no_error(
    kafka_config: dict[str, str], prefix: str
) -> None:
    """What replay does to clean its namespace: groups that hold committed offsets go; none left is fine."""
    from confluent_kafka import Consumer, TopicPartition

    specs = catalog(prefix, 1)
    ensure_topics(specs, kafka_config)
    groups = [f"{prefix}g{i}" for i in range(2)]
    for group in groups:
        consumer = Consumer({**kafka_config, "group.id": group, "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition(specs[0].name, 0, 0)], asynchronous=False)
        finally:
            consumer.close()
    assert delete_groups_with_prefix(prefix, kafka_config) == groups
    assert delete_groups_with_prefix(prefix, kafka_config) == []
