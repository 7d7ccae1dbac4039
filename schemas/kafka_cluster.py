"""The shape of the Kafka cluster the settings describe: how many brokers, and every address a client may
bootstrap from (a client that knows only one cannot start while that one is down)."""

from __future__ import annotations

#: Brokers a Kafka cluster may have (``RS_KAFKA_BROKERS``): one, or a quorum of three that survives a lost node.
KAFKA_CLUSTER_SIZES = (1, 3)
#: With three brokers and one bootstrap address, node n's broker port is that port + this times (n - 1): each
#: node's KRaft controller takes the port after its broker's.
KAFKA_NODE_PORT_STEP = 2


def check_cluster_size(brokers: int) -> int:
    """``brokers`` if it is a size the local platform runs, else a ValueError saying which are."""
    if brokers not in KAFKA_CLUSTER_SIZES:
        raise ValueError(f"must be 1 (a single broker) or 3 (a three-node KRaft cluster), not {brokers}")
    return brokers


def broker_addresses(bootstrap: str, brokers: int) -> tuple[str, ...]:
    """The ``host:port`` addresses of ``bootstrap`` (comma-separated); one address with ``brokers`` > 1 stands for
    the nodes ``rewardstream up`` runs, at its port, +2, +4."""
    given = tuple(part.strip() for part in bootstrap.split(",") if part.strip())
    host, _, port = given[0].rpartition(":") if len(given) == 1 else ("", "", "")
    if brokers == 1 or not host or not port.isdigit():
        return given
    return tuple(f"{host}:{int(port) + KAFKA_NODE_PORT_STEP * node}" for node in range(brokers))
