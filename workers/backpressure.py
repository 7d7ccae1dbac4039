"""Backpressure of the transactional worker loop (``workers.transactional_loop``).

When ``buffer_limit`` events are buffered, every assigned partition is paused (the consumer keeps polling, so
it stays in the group); they resume, from exactly where the loop stopped, below a quarter of that (each
resume is a seek and a fresh fetch, so the hysteresis is wide).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable

from confluent_kafka import Consumer, TopicPartition

from workers.in_flight import PartitionState

log = logging.getLogger("workers.transactional_loop")


def buffered(parts: Iterable[PartitionState]) -> int:
    """Events accepted and not yet committed."""
    return sum(len(p.pending) for p in parts)


class Backpressure:
    """Whether the loop's partitions are paused, and pausing or resuming them all."""

    def __init__(self, consumer: Consumer, role: str, limit: int) -> None:
        self.consumer = consumer
        self.role = role
        self.limit = limit
        self.paused = False

    def update(self, parts: Collection[PartitionState]) -> None:
        """Pause when the buffer is full, resume when it has drained to a quarter."""
        count = buffered(parts)
        if not self.paused and count >= self.limit:
            self.pause(parts)
        elif self.paused and count <= self.limit // 4:  # wide hysteresis: few refetches
            self.resume(parts)

    def pause(self, parts: Collection[PartitionState]) -> None:
        tps = [TopicPartition(p.topic, p.partition) for p in parts]
        log.debug("%s: pausing %s", self.role, [tp.partition for tp in tps])
        if tps:
            self.consumer.pause(tps)
        self.paused = True

    def resume(self, parts: Collection[PartitionState]) -> None:
        tps = [TopicPartition(p.topic, p.partition) for p in parts]
        log.debug("%s: resuming %s", self.role, [(p.partition, p.next_offset) for p in parts])
        if tps:
            self.consumer.resume(tps)
            for part in parts:
                if part.next_offset is not None:  # continue exactly after the last accepted message
                    self.consumer.seek(TopicPartition(part.topic, part.partition, part.next_offset))
        self.paused = False
