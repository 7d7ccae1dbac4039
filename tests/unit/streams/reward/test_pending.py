"""The pending index: a tick reads what is due, the table stays the truth, a parse is reused only for its bytes."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from streams.reward.join import JoinState, absorb, emitted
from streams.reward.pending import PendingIndex
from tests.unit.reward_events import execution, verdict

T0 = 1_000_000.0
DEADLINE = 30.0


class Rows:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def items(self) -> Iterable[tuple[str, bytes]]:
        return list(self.data.items())


def due_at(state: JoinState) -> float:
    return state.first_seen + DEADLINE


def pending(gid: str, first_seen: float, partition: int = 0) -> JoinState:
    return absorb(None, execution(gid), partition, first_seen).state


def write(rows: Rows, index: PendingIndex, state: JoinState) -> bytes:
    raw = state.dumps()
    rows.data[state.generation_id] = raw
    index.stored(state, raw)
    return raw


@pytest.fixture
def rows() -> Rows:
    return Rows()


def test_due_returns_only_what_is_due_and_keeps_it_queued_until_decided(rows: Rows) -> None:
    index = PendingIndex(rows, due_at)
    for i in range(5):
        write(rows, index, pending(f"g{i}", T0 + i))
    assert [s.generation_id for s in index.due({0: T0 + DEADLINE + 1})] == ["g0", "g1"]
    assert [s.generation_id for s in index.due({0: T0 + DEADLINE + 1})] == ["g0", "g1"]  # undecided: again
    write(rows, index, emitted(pending("g0", T0), "r", None))
    assert [s.generation_id for s in index.due({0: T0 + DEADLINE + 4})] == ["g1", "g2", "g3", "g4"]


def test_only_the_partitions_asked_for(rows: Rows) -> None:
    index = PendingIndex(rows, due_at)
    write(rows, index, pending("a", T0, partition=0))
    write(rows, index, pending("b", T0, partition=1))
    assert [s.generation_id for s in index.due({1: T0 + DEADLINE})] == ["b"]
    assert [s.generation_id for s in index.due({0: T0 + DEADLINE, 1: T0 + DEADLINE})] == ["a", "b"]


def test_a_parse_is_reused_only_while_the_table_holds_its_bytes(rows: Rows) -> None:
    index = PendingIndex(rows, due_at)
    state = pending("g", T0)
    raw = write(rows, index, state)
    assert index.state("g") is state
    rows.data["g"] = bytes(raw)  # equal bytes, another object: still the same state
    assert index.state("g") is state
    other = absorb(state, verdict("g"), 0, T0).state
    rows.data["g"] = other.dumps()  # written behind the index's back (a rollback): parsed anew
    got = index.state("g")
    assert got is not state
    assert got == other


def test_a_rolled_back_write_never_delays_the_restored_state(rows: Rows) -> None:
    index = PendingIndex(rows, due_at)
    first = pending("g", T0)
    raw = write(rows, index, first)
    write(rows, index, first.replace(first_seen=T0 + 500))  # later due; then rolled back:
    rows.data["g"] = raw
    assert [s.generation_id for s in index.due({0: T0 + DEADLINE})] == ["g"]


def test_a_state_due_later_than_queued_is_requeued_at_its_own_time(rows: Rows) -> None:
    index = PendingIndex(rows, due_at)
    state = pending("g", T0)
    write(rows, index, state)
    rows.data["g"] = state.replace(first_seen=T0 + 100).dumps()
    assert index.due({0: T0 + DEADLINE}) == []
    assert [s.generation_id for s in index.due({0: T0 + 100 + DEADLINE})] == ["g"]


def test_invalidate_rebuilds_from_the_table_skipping_rows_that_are_no_state(rows: Rows) -> None:
    index = PendingIndex(rows, due_at)
    rows.data["restored"] = pending("restored", T0).dumps()
    rows.data["done"] = emitted(pending("done", T0), "r", None).dumps()
    rows.data["bogus"] = b'{"status":"pending","nonsense":1}'
    assert [s.generation_id for s in index.due({0: T0 + DEADLINE})] == ["restored"]  # built on first use
    rows.data.clear()
    rows.data["later"] = pending("later", T0).dumps()
    assert index.due({0: T0 + DEADLINE}) == []  # "restored" is gone from the table, "later" unseen
    index.invalidate()
    assert [s.generation_id for s in index.due({0: T0 + DEADLINE})] == ["later"]
