"""The end offsets of many partitions in one request, on a connection of their own.

Why not ``Consumer.get_watermark_offsets``: on a consumer that is fetching, that request queues behind the
consumer's long-poll fetch to the same broker (up to ``fetch.wait.max.ms`` each), so a worker asking six
partitions a second for their ends spent most of each second blocked there and its steps waited seconds.
An admin client asks for every partition at once (``ListOffsets``), off the consumer's connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from schemas.errors import KafkaError


class EndOffsets:
    """``ends(partitions)``: each partition's high watermark now (what a read_uncommitted reader would reach:
    a read_committed consumer at it has read everything, aborted or open transactions included)."""

    def __init__(self, client_config: Mapping[str, str]) -> None:
        self._admin = AdminClient({**client_config, "log_level": 3})

    def ends(self, partitions: Sequence[TopicPartition], timeout_s: float) -> dict[tuple[str, int], int]:
        if not partitions:
            return {}
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(tp.topic, tp.partition): latest for tp in partitions}
        try:
            futures = self._admin.list_offsets(
                request, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout_s
            )
            return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}
        except KafkaException as exc:
            raise KafkaError(f"listing the end offsets of {len(request)} partitions failed: {exc}") from exc
