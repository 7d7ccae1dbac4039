"""Restoring a table from its changelog the moment the changelog was created, as a processor or an episode
worker does on its first start, against the real broker.

A topic created a moment ago can answer "not leader for partition" while its leader is elected. The restore
must wait for it: it used to fail, and the reward processor then exited to be restarted, which lost every
reward of a pipeline run without a supervisor (1 first start in 13 here).
"""

from __future__ import annotations

import uuid

import pytest

from bus.admin import delete_topics, ensure_topics
from bus.changelog import changelog_spec, restore_partition
from bus.clients import make_producer
from schemas.topics import catalog, topic_for

pytestmark = pytest.mark.integration

PARTITIONS = 3
STARTS = 20


def test_a_changelog_created_a_moment_ago_restores_at_once_every_time(kafka_config: dict[str, str]) -> None:
    joined = topic_for("executions", catalog("rs-test.restore.", PARTITIONS))
    for start in range(STARTS):
        spec = changelog_spec(f"rs-test.restore-{uuid.uuid4().hex[:10]}", joined)
        ensure_topics([spec], kafka_config)
        try:
            tables = [restore_partition(kafka_config, spec.name, p, timeout_s=60) for p in range(PARTITIONS)]
            assert tables == [{}] * PARTITIONS, start
            producer = make_producer(kafka_config)
            producer.produce(spec.name, key=b"g-1", value=b"row", partition=1)
            assert producer.flush(30) == 0
            assert restore_partition(kafka_config, spec.name, 1, timeout_s=60) == {"g-1": b"row"}
        finally:
            delete_topics([spec.name], kafka_config)
