"""The reward engine's Kafka clients, made in one place so that whatever else measures or mimics the engine (the
capacity floor in ``benchmarks``) uses exactly its configuration."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping

from confluent_kafka import Consumer, Producer

from bus.clients import make_consumer, make_transactional_producer
from bus.config import RANGE


def engine_clients(
    client_config: Mapping[str, str], app_id: str, transaction_timeout_ms: int
) -> tuple[Consumer, Producer]:
    """The consumer of group ``app_id`` (the range assignor: one member gets the same partition of every input,
    which the co-partitioned join needs) and a transactional producer with an id of this process's own."""
    consumer = make_consumer(client_config, app_id, **{"partition.assignment.strategy": RANGE})
    producer = make_transactional_producer(
        client_config, f"{app_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}", transaction_timeout_ms, **{"linger.ms": 2}
    )
    return consumer, producer
