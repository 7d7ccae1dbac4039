"""The Kafka engine's table: one changelog record per key and transaction, the value it ends with; the rewards
the integrity metrics count."""

from __future__ import annotations

import asyncio
import gc
from datetime import UTC, datetime
from typing import Any, cast

from bus.transaction import Transaction
from streams.reward.decided import DecidedReward
from streams.reward.kafka_engine import GC_YOUNG_THRESHOLD, _Savepoint, _Table, tune_gc


class Txn:
    """Records what the table produces into the transaction."""

    def __init__(self) -> None:
        self.produced: list[tuple[str, bytes | None, bytes | None, int]] = []

    def produce(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int = -1) -> None:
        self.produced.append((topic, key, value, partition))


def table() -> tuple[_Table, Txn]:
    txn = Txn()
    stage = _Savepoint(cast(Transaction, txn))
    return _Table(stage, cast(Transaction, txn), "log"), txn


def run(work: Any) -> None:
    asyncio.run(work)


def test_a_transaction_writes_each_key_once_with_its_last_value() -> None:
    t, txn = table()
    run(t.put(1, "a", b"1"))
    run(t.put(1, "a", b"2"))
    run(t.put(2, "b", b"x"))
    run(t.delete(2, "b"))
    assert txn.produced == []  # nothing before the transaction's work is done
    t.flush()
    assert sorted(txn.produced, key=repr) == [("log", b"a", b"2", 1), ("log", b"b", None, 2)]
    t.flush()
    assert len(txn.produced) == 2  # the next transaction starts clean


def test_a_rolled_back_message_leaves_the_value_before_it() -> None:
    t, txn = table()
    run(t.put(0, "a", b"1"))
    t._stage.release()  # the first message succeeded
    run(t.put(0, "a", b"2"))
    run(t.put(0, "new", b"n"))
    t.rollback()  # the second crashed
    assert t.get("a") == b"1"
    assert t.get("new") is None
    t.flush()
    assert sorted(txn.produced, key=repr) == [("log", b"a", b"1", 0), ("log", b"new", None, 0)]


def test_only_rewards_of_messages_that_succeeded_are_released_for_the_metrics() -> None:
    t, _txn = table()
    stage = t._stage
    stage.rewards.append(reward("kept"))
    stage.release()  # its message succeeded: into the transaction, counted once it commits
    stage.rewards.append(reward("undone"))
    t.rollback()  # this message crashed: its reward never goes out, never counts
    stage.release()
    assert [r.generation_id for r in stage.released] == ["kept"]


def reward(gid: str) -> DecidedReward:
    return DecidedReward(
        event_id=gid, created_at=datetime.now(UTC), generation_id=gid, episode_id=gid, run_id="r", task_id="t/1",
        task_version=None, turn=0, reward=1.0, policy_name="p", policy_version="1", components={}, reasons=[],
        flags=[], missing=[], inputs=[], valid=True, canary=False, invalid_reason=None,
    )  # fmt: skip


def test_tune_gc_freezes_the_start_up_heap_and_spaces_young_passes() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, before[1], before[2])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
