"""`rewardstream up --kafka-brokers 3`: three KRaft nodes of our own (own cache dir, ports 19392-19397), the
catalog replicated three times with two in sync, a node killed while acks=all writes go on, and `up` bringing it
back. Kafka only (`--only kafka`): the other services are not this test's business.

The figures (start, recovery, idle memory of each node) are printed; run with `-s` to see them.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from bus.admin import ExistingTopic, delete_topics, describe_topics, ensure_topics
from infra.local.process import group_members
from schemas.settings import Settings
from schemas.topics import catalog_for
from tests.integration.platform_env import IsolatedPlatform, kafka_platform, ok

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BASE_PORT = 19392
NODE_ADDRESSES = [f"127.0.0.1:{BASE_PORT + step}" for step in (0, 2, 4)]
MESSAGES = 200
T = TypeVar("T")


def _wait_for(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while (value := probe()) is None or value is False:
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.3)
    return value


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[IsolatedPlatform]:
    """The CLI on a cache dir of its own (sharing the main one's Kafka jars) and ports nobody else uses; every
    process it started is stopped afterwards, by its pid file."""
    platform = kafka_platform(tmp_path, BASE_PORT)
    env = platform.env
    try:
        yield platform
    finally:
        platform.cli("down", "--only", "kafka", env={**env, "RS_KAFKA_BROKERS": "3"})


def _nodes(platform: IsolatedPlatform, env: dict[str, str]) -> list[dict[str, Any]]:
    result = platform.cli("status", "--json", "--only", "kafka", env=env)
    nodes: list[dict[str, Any]] = result.json()["services"]["kafka"]["nodes"]
    return nodes


def _admin(config: dict[str, str]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({**config, "log_level": 0})


def _min_insync(config: dict[str, str], topic: str) -> str:
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource("topic", topic)
    admin = _admin(config)  # kept until the answer is in: a dropped client cancels its requests
    described = admin.describe_configs([resource])[resource].result(timeout=30)
    return str(described["min.insync.replicas"].value)


def _produce_transactionally(config: dict[str, str], topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({**config, "transactional.id": f"rs-test-{uuid.uuid4().hex[:8]}", "log_level": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"in a transaction")
    producer.commit_transaction(30)


def _produce_all(config: dict[str, str], topic: str, count: int) -> list[str]:
    """Produce ``count`` records with acks=all; the delivery errors (none expected)."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({**config, "acks": "all", "enable.idempotence": True, "log_level": 0})
    for n in range(count):
        producer.produce(topic, key=str(n).encode(), value=f"v{n}".encode(),
                         on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)  # fmt: skip
        producer.poll(0)
    assert producer.flush(90) == 0, "records left undelivered after 90s"
    return errors


def _consume_all(config: dict[str, str], topic: str, count: int) -> set[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer({**config, "group.id": f"rs-test-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "log_level": 0})  # fmt: skip
    consumer.subscribe([topic])
    values: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            value = None if message is None or message.error() is not None else message.value()
            if value is not None:
                values.add(value)
    finally:
        consumer.close()
    return values


@pytest.mark.timeout(300)
def test_three_brokers_survive_a_lost_node_and_up_restores_it(cluster: IsolatedPlatform) -> None:
    started = time.monotonic()
    ok(cluster.cli("up", "--kafka-brokers", "3", "--only", "kafka"))
    print(f"\nthree-node `up`: {time.monotonic() - started:.1f}s")
    env = {**cluster.env, "RS_KAFKA_BROKERS": "3"}

    nodes = _nodes(cluster, env)
    assert [(n["id"], n["endpoint"], n["healthy"]) for n in nodes] == [
        (i + 1, address, True) for i, address in enumerate(NODE_ADDRESSES)
    ], nodes
    print("idle resident memory per node: " + ", ".join(f"node {n['id']} {n['rss_mb']:.0f} MB" for n in nodes))

    settings = Settings(cache_dir=cluster.cache_dir, kafka_bootstrap=NODE_ADDRESSES[0], kafka_brokers=3,
                        topic_prefix=f"rs-test.{uuid.uuid4().hex[:8]}.", topic_partitions=3)  # fmt: skip
    config = settings.kafka_client_config()
    assert config["bootstrap.servers"] == ",".join(NODE_ADDRESSES)
    specs = catalog_for(settings)
    ensure_topics(specs, config)
    try:
        # Each broker learns of new topics from the controllers in its own time: wait until the one asked has.
        names = [s.name for s in specs]

        def every_one() -> dict[str, ExistingTopic] | None:
            found = describe_topics(names, config)
            return found if len(found) == len(names) else None

        described = _wait_for(every_one, 30, "every broker to know the new topics")
        assert {name: t.replication_factor for name, t in described.items()} == {s.name: 3 for s in specs}
        assert {name: t.config["min.insync.replicas"] for name, t in described.items()} == {s.name: "2" for s in specs}

        generations = specs[0].name
        _produce_transactionally(config, generations)
        assert describe_topics(["__transaction_state"], config)["__transaction_state"].replication_factor == 3
        assert _min_insync(config, "__transaction_state") == "2"

        # A node dies (SIGKILL, no goodbye): the others take its partitions, and acks=all writes still land.
        victim = nodes[0]
        os.kill(victim["pid"], signal.SIGKILL)
        _wait_for(lambda: not _nodes(cluster, env)[0]["healthy"], 30, "status to report the killed node")
        killed_at = time.monotonic()
        errors = _produce_all(config, generations, MESSAGES)
        assert errors == []
        print(f"{MESSAGES} acks=all records with node {victim['id']} dead: {time.monotonic() - killed_at:.1f}s")

        def shrunk() -> bool:
            partitions = _admin(config).list_topics(generations, timeout=10).topics[generations].partitions
            return all(victim["id"] not in p.isrs and len(p.isrs) == 2 for p in partitions.values())

        _wait_for(shrunk, 60, "the killed node to leave every in-sync replica set")
        values = _consume_all(config, generations, MESSAGES + 1)
        assert {f"v{n}".encode() for n in range(MESSAGES)} <= values
        assert b"in a transaction" in values
        assert describe_topics(["__consumer_offsets"], config)["__consumer_offsets"].replication_factor == 3

        restarted = time.monotonic()
        ok(cluster.cli("up", "--only", "kafka", env=env))
        print(f"`up` with one node down: {time.monotonic() - restarted:.1f}s")
        back = _nodes(cluster, env)
        assert all(n["healthy"] for n in back), back
        assert back[0]["pid"] != victim["pid"]
        assert [n["pid"] for n in back[1:]] == [n["pid"] for n in nodes[1:]]  # the living nodes were left alone
    finally:
        delete_topics([s.name for s in specs], config)

    pids = [n["pid"] for n in back]
    ok(cluster.cli("down", "--only", "kafka", env=env))
    assert all(not group_members(pid) for pid in pids)
    assert not list((cluster.cache_dir / "run").glob("kafka*.pid"))
