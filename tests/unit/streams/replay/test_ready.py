"""Readiness of the replay pipeline: every consumer group stable with partitions assigned."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import ConsumerGroupState

from streams.replay.ready import _ready, pipeline_groups


def group(state: ConsumerGroupState, *assignments: list[str]) -> SimpleNamespace:
    members = [SimpleNamespace(assignment=SimpleNamespace(topic_partitions=a)) for a in assignments]
    return SimpleNamespace(state=state, members=members)


def test_groups_of_a_prefix() -> None:
    assert pipeline_groups("rs.replay.x.") == [
        "rs.replay.x.executor", "rs.replay.x.verifier", "rs.replay.x.judge", "rs.replay.x.rewards",
    ]  # fmt: skip


def test_ready_only_when_stable_with_partitions() -> None:
    assert _ready(group(ConsumerGroupState.STABLE, ["tp0"], []))
    assert not _ready(group(ConsumerGroupState.STABLE))
    assert not _ready(group(ConsumerGroupState.STABLE, [], []))
    assert not _ready(group(ConsumerGroupState.COMPLETING_REBALANCING, ["tp0"]))
    assert not _ready(group(ConsumerGroupState.EMPTY))
