"""The topic catalog: one topic per role, joined topics co-partitioned, names from the prefix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.codec import Contract
from schemas.episodes import ActionEvent, ObservationEvent
from schemas.errors import ConfigError
from schemas.events import GenerationEvent
from schemas.settings import Settings
from schemas.topics import Role, catalog, catalog_for, min_insync_replicas, topic_for

ROLES = [
    "generations", "executions", "verdicts", "judgements", "rewards", "actions", "observations", "run_requests",
    "run_replies", "audits", "logs", "dlq",
]  # fmt: skip


def test_one_topic_per_role_with_prefix() -> None:
    specs = catalog("rs.", partitions=12)
    assert [s.role for s in specs] == ROLES
    assert [s.name for s in specs] == [f"rs.{r}" for r in ROLES]
    assert topic_for("generations", specs).model is GenerationEvent


def test_joined_topics_share_the_partition_count() -> None:
    specs = catalog("x-", partitions=5, replication_factor=3)
    joined = [s for s in specs if s.joined]
    assert {s.role for s in joined} == {"generations", "executions", "verdicts", "judgements", "rewards"}
    assert {s.partitions for s in specs} == {5}
    assert {s.replication_factor for s in specs} == {3}
    assert all(s.config()["cleanup.policy"] == "delete" for s in specs)


@pytest.mark.parametrize(("replicas", "in_sync"), [(1, 1), (2, 1), (3, 2), (5, 2)])
def test_min_insync_replicas_follows_the_replicas(replicas: int, in_sync: int) -> None:
    """Two in sync once there are three replicas: a lost broker stops no write, and no acknowledged write lives
    on one broker only; fewer replicas ask for one, else a lost broker would stop every write."""
    assert min_insync_replicas(replicas) == in_sync
    specs = catalog("x-", replication_factor=replicas)
    assert {s.topic_config()["min.insync.replicas"] for s in specs} == {str(in_sync)}
    assert all("min.insync.replicas" not in s.config() for s in specs)  # the chart's KafkaTopics: the operator's


def test_three_brokers_replicate_the_catalog_three_times_unless_told() -> None:
    assert {s.replication_factor for s in catalog_for(Settings())} == {1}
    three = catalog_for(Settings(kafka_brokers=3))
    assert {(s.replication_factor, s.min_insync_replicas) for s in three} == {(3, 2)}
    told = catalog_for(Settings(kafka_brokers=3, topic_replication_factor=2))
    assert {(s.replication_factor, s.min_insync_replicas) for s in told} == {(2, 1)}


def test_episode_topics_are_keyed_and_partitioned_like_the_joined_ones() -> None:
    specs = catalog("rs.", partitions=9)
    joined = {s.partitions for s in specs if s.joined}
    episode_roles: tuple[tuple[Role, type[Contract]], ...] = (
        ("actions", ActionEvent),
        ("observations", ObservationEvent),
    )
    for role, model in episode_roles:
        spec = topic_for(role, specs)
        assert spec.model is model
        assert {spec.partitions} == joined
        assert spec.as_json()["key"] == "episode_id"
        assert spec.cleanup_policy == "delete"
        assert spec.retention_ms == topic_for("generations", specs).retention_ms  # as long as its submits
        assert not spec.joined  # the reward join never reads them: a submit makes a generation


@pytest.mark.parametrize(("prefix", "partitions"), [("bad prefix ", 3), ("rs.", 0)])
def test_bad_catalog_parameters(prefix: str, partitions: int) -> None:
    with pytest.raises(ConfigError):
        catalog(prefix, partitions)


def test_cli_topics_json_prints_the_catalog() -> None:
    cli = str(Path(sys.executable).with_name("rewardstream"))
    out = subprocess.run(
        [cli, "topics", "--json", "--prefix", "demo.", "--partitions", "4"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    topics = json.loads(out)["topics"]
    assert [t["role"] for t in topics] == ROLES
    assert topics[0] | {"config": None, "description": None} == {
        "role": "generations",
        "name": "demo.generations",
        "partitions": 4,
        "replication_factor": 1,
        "min_insync_replicas": 1,
        "retention_ms": 7 * 86_400_000,
        "cleanup_policy": "delete",
        "key": "episode_id",
        "value": "GenerationEvent",
        "joined": True,
        "config": None,
        "description": None,
    }


def test_the_docs_topic_table_is_the_catalogs() -> None:
    """docs/tasks.md's retention table is what ``rewardstream topics --markdown`` prints for the defaults: a
    retention changed in the catalog fails here until the docs say it too."""
    from schemas.topics import TABLE_BEGIN, TABLE_END, markdown_table

    text = (Path(__file__).resolve().parents[3] / "docs" / "tasks.md").read_text(encoding="utf-8")
    assert text.count(TABLE_BEGIN) == text.count(TABLE_END) == 1
    table = text.split(TABLE_BEGIN + "\n", 1)[1].split(TABLE_END, 1)[0]
    assert table == markdown_table(catalog()), "regenerate it with `rewardstream topics --markdown`"
    assert "| `rs.rewards` | 30 days | delete |" in table
    assert "| `rs.run_requests` | 1 day | delete | request_id |" in table
