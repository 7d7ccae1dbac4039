"""A table's changelog: a compacted topic per app, one partition per input partition, restored on assignment.

The reward processor's join table is named like Faust's (``<app_id>-reward-join-changelog``) so both engines
find the same state; the episode worker's state table (``<app_id>-episode-state-changelog``) is another.
"""

from __future__ import annotations

from collections.abc import Mapping

from bus.partition_reader import read_to_end
from schemas.topics import TopicSpec

TABLE_NAME = "reward-join"


def changelog_name(app_id: str, table: str = TABLE_NAME) -> str:
    """The changelog topic of an app's table (the join table unless named)."""
    return f"{app_id}-{table}-changelog"


def changelog_spec(
    app_id: str,
    like: TopicSpec,
    table: str = TABLE_NAME,
    description: str = "the reward processor's join table (generation_id -> join state); compacted",
) -> TopicSpec:
    """A compacted topic with the partitioning of the input topic ``like`` (co-partitioned by construction)."""
    return TopicSpec(
        role=like.role,
        name=changelog_name(app_id, table),
        partitions=like.partitions,
        replication_factor=like.replication_factor,
        retention_ms=-1,
        cleanup_policy="compact",
        model=like.model,
        joined=False,
        description=description,
        min_insync_replicas=like.min_insync_replicas,
    )


def restore_partition(
    client_config: Mapping[str, str], topic: str, partition: int, timeout_s: float = 120.0
) -> dict[str, bytes]:
    """The table partition as the committed changelog says (tombstones delete; aborted writes never show).

    A transaction left open by a killed processor holds the end back until the broker aborts it
    (``transaction.timeout.ms``), which is why that timeout is short.
    """
    table: dict[str, bytes] = {}
    catch_up(client_config, topic, partition, table, 0, timeout_s=timeout_s)
    return table


def catch_up(
    client_config: Mapping[str, str],
    topic: str,
    partition: int,
    table: dict[str, bytes],
    start: int,
    *,
    timeout_s: float = 120.0,
) -> int:
    """Apply the committed changelog records from ``start`` to the end onto ``table``; the offset to go on from
    (a reader of a partition it does not own keeps its copy current this way, reading only what is new)."""
    records, end = read_to_end(client_config, topic, partition, start, group=f"{topic}-restore", timeout_s=timeout_s)
    for _offset, key, value in records:
        name = (key or b"").decode()
        if value is None:
            table.pop(name, None)
        else:
            table[name] = value
    return end
