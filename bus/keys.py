"""Which partition a keyed record lands on: the producers' partitioner, computed without producing.

Why: every topic is keyed by ``episode_id`` and partitioned alike, so one episode's actions, observations and
generation share a partition number; a reader that wants one episode (the SDK's ``resume``) reads that one
partition instead of all of them. Every producer here is configured with ``PARTITIONER`` (``bus.config``):
librdkafka's ``consistent_random`` is the CRC-32 of the key modulo the partition count (keyless and empty-keyed
records, which we never produce on keyed topics, go to a random partition).
"""

from __future__ import annotations

import zlib

#: The partitioner every producer of ``bus.config`` uses.
PARTITIONER = "consistent_random"


def partition_for(key: bytes, partitions: int) -> int:
    """The partition of a topic with ``partitions`` partitions that a record keyed ``key`` goes to."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    if not key:
        raise ValueError("an empty key goes to a random partition")
    return zlib.crc32(key) % partitions
