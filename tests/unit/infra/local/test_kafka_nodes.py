"""The local Kafka's layout: one broker as it always was, or three KRaft nodes with their own ports and files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from infra.local.kafka_nodes import every_process, kafka_nodes, server_properties
from infra.local.paths import PlatformPaths
from infra.local.platform import Platform
from schemas.errors import PlatformError
from schemas.settings import Settings


def _settings(tmp_path: Path, **kwargs: Any) -> Settings:
    return Settings(cache_dir=tmp_path, **kwargs)


def test_the_single_broker_keeps_its_paths_ports_and_replication(tmp_path: Path) -> None:
    (node,) = kafka_nodes(_settings(tmp_path), PlatformPaths(tmp_path))
    assert (node.node_id, node.address, node.controller_port) == (1, "127.0.0.1:9092", 9093)
    assert node.data == tmp_path / "data" / "kafka"
    assert node.process.pidfile == tmp_path / "run" / "kafka.pid"
    assert node.process.logfile == tmp_path / "logs" / "kafka.log"
    lines = server_properties(node, (node,))
    assert lines["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert lines["offsets.topic.replication.factor"] == lines["transaction.state.log.replication.factor"] == "1"
    assert lines["transaction.state.log.min.isr"] == "1"
    assert "min.insync.replicas" not in lines
    assert "default.replication.factor" not in lines


def test_three_nodes_from_one_address_take_every_other_port(tmp_path: Path) -> None:
    settings = _settings(tmp_path, kafka_bootstrap="127.0.0.1:19192", kafka_brokers=3)
    nodes = kafka_nodes(settings, PlatformPaths(tmp_path))
    assert [(n.node_id, n.port, n.controller_port) for n in nodes] == [
        (1, 19192, 19193),
        (2, 19194, 19195),
        (3, 19196, 19197),
    ]
    assert [n.data for n in nodes] == [tmp_path / "data" / "kafka-cluster" / f"node-{i}" for i in (1, 2, 3)]
    assert [n.process.pidfile.name for n in nodes] == ["kafka-1.pid", "kafka-2.pid", "kafka-3.pid"]
    assert settings.kafka_client_config()["bootstrap.servers"] == "127.0.0.1:19192,127.0.0.1:19194,127.0.0.1:19196"
    lines = server_properties(nodes[1], nodes)
    assert lines["node.id"] == "2"
    assert lines["controller.quorum.voters"] == "1@127.0.0.1:19193,2@127.0.0.1:19195,3@127.0.0.1:19197"
    assert lines["listeners"] == "PLAINTEXT://127.0.0.1:19194,CONTROLLER://127.0.0.1:19195"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "default.replication.factor"):  # fmt: skip
        assert lines[key] == "3", key
    assert lines["min.insync.replicas"] == lines["transaction.state.log.min.isr"] == "2"


def test_a_production_bootstrap_is_taken_as_given() -> None:
    given = "kafka-1.prod:9093, kafka-2.prod:9093"
    assert Settings(kafka_bootstrap=given).kafka_client_config()["bootstrap.servers"] == given.replace(" ", "")


def test_down_finds_the_brokers_of_either_size(tmp_path: Path) -> None:
    names = [p.pidfile.name for p in every_process(PlatformPaths(tmp_path))]
    assert names == ["kafka.pid", "kafka-1.pid", "kafka-2.pid", "kafka-3.pid"]


def test_three_addresses_are_taken_as_given_and_must_leave_room_for_controllers(tmp_path: Path) -> None:
    given = "127.0.0.1:19300,127.0.0.1:19310,127.0.0.1:19320"
    nodes = kafka_nodes(_settings(tmp_path, kafka_bootstrap=given, kafka_brokers=3), PlatformPaths(tmp_path))
    assert [n.port for n in nodes] == [19300, 19310, 19320]
    crowded = _settings(tmp_path, kafka_bootstrap="127.0.0.1:19300,127.0.0.1:19301,127.0.0.1:19304", kafka_brokers=3)
    with pytest.raises(PlatformError, match="node 2's broker and node 1's controller on port 19301"):
        kafka_nodes(crowded, PlatformPaths(tmp_path))
    two = _settings(tmp_path, kafka_bootstrap="127.0.0.1:19300,127.0.0.1:19310", kafka_brokers=3)
    with pytest.raises(PlatformError, match="names 2 addresses but RS_KAFKA_BROKERS is 3"):
        kafka_nodes(two, PlatformPaths(tmp_path))


def test_a_cluster_size_other_than_one_or_three_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"must be 1 .* or 3"):
        Settings(kafka_brokers=2)


def test_only_names_known_services(tmp_path: Path) -> None:
    platform = Platform.from_settings(_settings(tmp_path), ["kafka"])
    assert [svc.name for svc in platform.services] == ["kafka"]
    with pytest.raises(PlatformError, match="no service named kafak: the services are kafka, opensearch"):
        Platform.from_settings(_settings(tmp_path), ["kafak"])


def _live_pidfile(process: Any) -> None:
    """A pid file naming this (live) test process, as ``ManagedProcess.start`` writes one."""
    from infra.local.process import _start_time

    process.pidfile.parent.mkdir(parents=True, exist_ok=True)
    process.pidfile.write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")


@pytest.mark.parametrize(
    ("running", "configured", "told"), [(3, 1, "RS_KAFKA_BROKERS=3"), (1, 3, "RS_KAFKA_BROKERS=1")]
)
def test_brokers_of_the_other_size_are_named_not_restarted(
    tmp_path: Path, running: int, configured: int, told: str
) -> None:
    """A cluster ``up --kafka-brokers 3`` started, seen by a ``status`` (or ``up``) without RS_KAFKA_BROKERS=3 (and
    the other way round): unhealthy with the fix in one line, and ``start`` refuses rather than fight for ports."""
    from infra.local.kafka import KafkaService

    paths = PlatformPaths(tmp_path)
    for node in kafka_nodes(_settings(tmp_path, kafka_brokers=running), paths):
        _live_pidfile(node.process)
    service = KafkaService(_settings(tmp_path, kafka_brokers=configured), paths)
    health = service.health()
    assert not health.healthy
    assert health.reason is not None
    assert told in health.reason
    with pytest.raises(PlatformError, match=told):
        service.start()
