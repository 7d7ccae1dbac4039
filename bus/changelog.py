"""The join table's changelog: a compacted topic per app, one partition per input partition, restored on assignment.

Named like Faust's (``<app_id>-reward-join-changelog``) so both engines find the same state.
"""

from __future__ import annotations

from collections.abc import Mapping

from bus.partition_reader import read_to_end
from schemas.topics import TopicSpec

TABLE_NAME = "reward-join"


def changelog_name(app_id: str) -> str:
    """The changelog topic of an app's join table."""
    return f"{app_id}-{TABLE_NAME}-changelog"


def changelog_spec(app_id: str, like: TopicSpec) -> TopicSpec:
    """A compacted topic with the partitioning of the input topic ``like`` (co-partitioned by construction)."""
    return TopicSpec(
        role=like.role,
        name=changelog_name(app_id),
        partitions=like.partitions,
        replication_factor=like.replication_factor,
        retention_ms=-1,
        cleanup_policy="compact",
        model=like.model,
        joined=False,
        description="the reward processor's join table (generation_id -> join state); compacted",
    )


def restore_partition(
    client_config: Mapping[str, str], topic: str, partition: int, timeout_s: float = 120.0
) -> dict[str, bytes]:
    """The table partition as the committed changelog says (tombstones delete; aborted writes never show).

    A transaction left open by a killed processor holds the end back until the broker aborts it
    (``transaction.timeout.ms``), which is why that timeout is short.
    """
    records, _end = read_to_end(client_config, topic, partition, 0, group=f"{topic}-restore", timeout_s=timeout_s)
    table: dict[str, bytes] = {}
    for _offset, key, value in records:
        name = (key or b"").decode()
        if value is None:
            table.pop(name, None)
        else:
            table[name] = value
    return table
