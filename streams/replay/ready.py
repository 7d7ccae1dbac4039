"""Wait until the pipeline's consumer groups hold their partitions, before anything is fed in.

Why: a worker answers /metrics before its consumer group is assigned; under load the judge can be assigned
(and score) tens of seconds before the verifier, and the join's deadline counts from the first part, so
generations fed in too early would get "verdict missing" rewards that say nothing about the code.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

from schemas.errors import KafkaError

#: The roles whose consumer groups read the generations (``<prefix><role>``) and the reward processor's app.
WORKER_ROLES = ("executor", "verifier", "judge")


def pipeline_groups(prefix: str) -> list[str]:
    """Consumer groups of the pipeline on ``prefix``: the workers' and the reward processor's (``<prefix>rewards``)."""
    return [f"{prefix}{role}" for role in WORKER_ROLES] + [f"{prefix}rewards"]


def _ready(description: object) -> bool:
    state = getattr(description, "state", None)
    members = getattr(description, "members", None) or []
    if state != ConsumerGroupState.STABLE or not members:
        return False
    assigned = [getattr(getattr(m, "assignment", None), "topic_partitions", None) for m in members]
    return any(assigned)


def wait_groups_ready(config: Mapping[str, str], groups: Sequence[str], timeout_s: float = 180.0) -> None:
    """Return once every group is stable with partitions assigned; a one-line error naming the laggards."""
    admin = AdminClient({**config, "log_level": 3})
    deadline = time.monotonic() + timeout_s
    while True:
        waiting = []
        for group, future in admin.describe_consumer_groups(list(groups), request_timeout=10).items():
            try:
                if not _ready(future.result()):
                    waiting.append(group)
            except KafkaException:
                waiting.append(group)
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise KafkaError(f"consumer groups {waiting} have no assigned partitions after {timeout_s:.0f}s")
        time.sleep(0.5)
