"""Every Kafka client's configuration, written once: group members, read-to-end readers, producers.

Why one place: each choice here is a correctness choice (manual commits, ``read_committed``, idempotence);
a client that gets one wrong silently loses, duplicates or joins results of aborted transactions. Modelled
on quix-streams' ``kafka/configuration.py``: callers pass the connection settings and what differs.
"""

from __future__ import annotations

from collections.abc import Mapping

from bus.keys import PARTITIONER

#: A librdkafka configuration (values are str, int or bool).
ClientConfig = dict[str, str | int | bool]

#: The group members' assignment strategy (librdkafka's incremental, KIP-429 protocol).
COOPERATIVE = "cooperative-sticky"
#: The eager per-topic strategy, for a member reading several topics: sticky balances partition counts, not
#: topics (one member of two could own every partition of one topic), and for the reward processor's joins.
RANGE = "range"


def consumer_config(client_config: Mapping[str, str], group_id: str, **overrides: str | int | bool) -> ClientConfig:
    """A consumer-group member that commits only what the caller says is done, never sees aborted transactions."""
    return {
        **client_config,
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        # Heartbeats run on librdkafka's own thread, so a short session timeout is safe and lets a crashed
        # worker's partitions move to a live one in ~10 s instead of the default 45 s.
        "session.timeout.ms": 10_000,
        # Incremental rebalancing: a member joining or leaving moves only the partitions that change owner, so
        # every other member's in-flight runs go on (``workers.rebalancing``). A rebalance callback that assigns
        # must use incremental_assign. Members reading several topics use RANGE instead (see RANGE).
        "partition.assignment.strategy": COOPERATIVE,
        "log_level": 3,
        **overrides,
    }


def reader_config(client_config: Mapping[str, str], group_id: str, **overrides: str | int | bool) -> ClientConfig:
    """A reader of partitions it assigns itself (``assign``, never ``subscribe``): committed records only, no
    offsets committed (``group_id`` only names it in the broker's logs)."""
    return {
        **client_config,
        "group.id": group_id,
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "log_level": 3,
        **overrides,
    }


def producer_config(client_config: Mapping[str, str], **overrides: str | int | bool) -> ClientConfig:
    """An idempotent producer: broker retries never duplicate or reorder a partition's messages. Keyed records
    go where ``bus.keys.partition_for`` says (the partitioner is pinned, not left to the library's default)."""
    return {
        **client_config,
        "partitioner": PARTITIONER,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "log_level": 3,
        **overrides,
    }


def transactional_config(
    client_config: Mapping[str, str], transactional_id: str, timeout_ms: int, **overrides: str | int | bool
) -> ClientConfig:
    """A transactional producer; ``timeout_ms`` bounds how long a dead owner's open transaction holds back
    read_committed readers before the broker aborts it."""
    return producer_config(
        client_config, **{"transactional.id": transactional_id, "transaction.timeout.ms": timeout_ms, **overrides}
    )
