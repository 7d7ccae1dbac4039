"""Where each local Kafka node lives: its ports, data dir, pid file, log and ``server.properties``.

One node (``RS_KAFKA_BROKERS=1``, the default) is laid out as it always was: ``data/kafka``, ``run/kafka.pid``,
``logs/kafka.log``, node id 1, every replication factor 1. Three nodes (``RS_KAFKA_BROKERS=3``) are a KRaft
cluster whose every node is broker and controller (a quorum of three voters), each with its own
``data/kafka-cluster/node-<id>``, ``run/kafka-<id>.pid`` and ``logs/kafka-<id>.log``; every topic there, the
internal ones included, has three replicas and needs two in sync, so the cluster takes writes while any one node
is down and loses none it acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.local.paths import PlatformPaths
from infra.local.process import ManagedProcess
from infra.local.service import split_host_port
from infra.local.versions import KAFKA_PORT_CONTROLLER_OFFSET
from schemas.errors import PlatformError
from schemas.settings import Settings
from schemas.topics import min_insync_replicas

DEFAULT_PORT = 9092
#: The most nodes a cluster of ours has: the pid files ``down`` looks at, whichever size is configured now.
MAX_NODES = 3


@dataclass(frozen=True)
class KafkaNode:
    """One Kafka process: broker and KRaft controller."""

    node_id: int
    host: str
    port: int
    data: Path
    process: ManagedProcess

    @property
    def controller_port(self) -> int:
        return self.port + KAFKA_PORT_CONTROLLER_OFFSET

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def config(self) -> Path:
        return self.data / "server.properties"

    @property
    def log_dir(self) -> Path:
        return self.data / "log"


def single_process(paths: PlatformPaths) -> ManagedProcess:
    """The single broker's process (its pid file and log, as they have always been named)."""
    return ManagedProcess(name="kafka", pidfile=paths.run / "kafka.pid", logfile=paths.logs / "kafka.log")


def cluster_process(paths: PlatformPaths, node_id: int) -> ManagedProcess:
    """A cluster node's process."""
    name = f"kafka-{node_id}"
    return ManagedProcess(name=name, pidfile=paths.run / f"{name}.pid", logfile=paths.logs / f"{name}.log")


def cluster_dir(paths: PlatformPaths) -> Path:
    """The three nodes' data dirs and the cluster id they were formatted with."""
    return paths.data / "kafka-cluster"


def kafka_nodes(settings: Settings, paths: PlatformPaths) -> tuple[KafkaNode, ...]:
    """The nodes these settings describe: one, or three at the bootstrap's addresses."""
    addresses = settings.kafka.broker_addresses()
    if settings.kafka.brokers == 1:
        host, port = split_host_port(addresses[0] if addresses else "", DEFAULT_PORT)
        return (KafkaNode(1, host, port, paths.data / "kafka", single_process(paths)),)
    if len(addresses) != settings.kafka.brokers:
        raise PlatformError(
            f"RS_KAFKA_BOOTSTRAP names {len(addresses)} addresses but RS_KAFKA_BROKERS is {settings.kafka.brokers}: "
            "name one (the others follow at its port +2 and +4) or every node's"
        )
    nodes = []
    for node_id, address in enumerate(addresses, start=1):
        host, port = split_host_port(address, DEFAULT_PORT)
        data = cluster_dir(paths) / f"node-{node_id}"
        nodes.append(KafkaNode(node_id, host, port, data, cluster_process(paths, node_id)))
    _require_distinct_ports(nodes)
    return tuple(nodes)


def every_process(paths: PlatformPaths) -> tuple[ManagedProcess, ...]:
    """Every Kafka process ``up`` may have started in this cache dir, of either size: ``down`` stops them all,
    so changing RS_KAFKA_BROKERS between ``up`` and ``down`` leaves no broker behind."""
    return (single_process(paths), *(cluster_process(paths, n) for n in range(1, MAX_NODES + 1)))


def _require_distinct_ports(nodes: list[KafkaNode]) -> None:
    taken: dict[tuple[str, int], str] = {}
    for node in nodes:
        for port, what in ((node.port, "broker"), (node.controller_port, "controller")):
            label = f"node {node.node_id}'s {what}"
            if (clash := taken.get((node.host, port))) is not None:
                raise PlatformError(
                    f"RS_KAFKA_BOOTSTRAP puts {label} and {clash} on port {port}: each node needs its port and the "
                    f"next one (its controller), so leave a gap of {KAFKA_PORT_CONTROLLER_OFFSET + 1} between them"
                )
            taken[(node.host, port)] = label


def server_properties(node: KafkaNode, nodes: tuple[KafkaNode, ...]) -> dict[str, str]:
    """The ``server.properties`` of ``node`` in the cluster ``nodes`` (one node: the single broker's, as ever)."""
    voters = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in nodes)
    replicas = len(nodes)
    in_sync = str(min_insync_replicas(replicas))
    lines = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{node.host}:{node.port},CONTROLLER://{node.host}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{node.host}:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(node.log_dir),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": in_sync,
        "transaction.state.log.num.partitions": "8",
        "group.initial.rebalance.delay.ms": "0",
        "log.retention.hours": "24",
        "log.segment.bytes": str(64 << 20),
    }
    if replicas > 1:
        lines |= {
            # Every topic, whoever creates it, is replicated and refuses an acks=all write only one broker has.
            "default.replication.factor": str(replicas),
            "min.insync.replicas": in_sync,
            # Three JVMs on one small host: fewer threads than Kafka's defaults (sized for a machine of its own).
            "num.network.threads": "2",
            "num.io.threads": "4",
            "background.threads": "4",
        }
    return lines
