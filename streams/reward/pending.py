"""Pending join states by due time, each parsed once: a tick costs what is due, not what waits.

Why: the table holds bytes (the changelog's form), and parsing every pending state at every tick (pydantic's
full validation) was most of the reward processor's CPU. Here each pending state is kept parsed beside the
bytes it came from, and queued per partition by the time it next needs a decision.

The table stays the truth. A parsed state is used only while the table holds the very bytes it came from, and
every queued entry is checked against the table when it comes due, so a write the index did not see (a
savepoint's rollback) costs a parse, never a wrong decision. The invariant: every pending state in the table
has a queued entry due no later than the state itself (a rollback restores a state that had one, and no tick
runs between a write and its rollback). What the index cannot see at all, a table restored or dropped under
it, is covered by ``invalidate``: the next ``due`` rebuilds the index from the table.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from streams.reward.join import JoinState, Row, row_pending

log = logging.getLogger("rewardstream.rewards")


class Rows(Protocol):
    """The part of the processor's table the index reads."""

    def get(self, key: str) -> Row | None: ...
    def items(self) -> Iterable[tuple[str, Row]]: ...


def load_state(key: str, raw: Row) -> JoinState | None:
    """A table row as a join state; a row that is none (written by something else) is skipped, not fatal."""
    if isinstance(raw, JoinState):
        return raw
    try:
        return JoinState.loads(raw)
    except ValueError as exc:
        log.debug("table row %r is no join state: %s", key, exc)
        return None


class PendingIndex:
    """Parsed pending states of a table, and a heap per partition of (due time, generation id)."""

    def __init__(self, rows: Rows, due_at: Callable[[JoinState], float]) -> None:
        self._rows = rows
        self._due_at = due_at
        self._parsed: dict[str, tuple[Row, JoinState]] = {}
        self._heaps: dict[int, list[tuple[float, str]]] = {}
        #: The due time of each generation's one live heap entry (older entries of it are skipped when popped).
        self._queued: dict[str, float] = {}
        self._stale = True

    def invalidate(self) -> None:
        """The table changed under the index (restored, dropped): rebuild it before the next ``due``."""
        self._stale = True

    def state(self, key: str) -> JoinState | None:
        """The table's state of ``key``, parsed (and validated) only if its bytes changed since last parsed."""
        raw = self._rows.get(key)
        return None if raw is None else self.parse(key, raw)

    def parse(self, key: str, raw: Row) -> JoinState | None:
        """``raw`` (the table's row of ``key``) as a join state, reusing the parse of the same bytes."""
        cached = self._parsed.get(key)
        if cached is not None and (cached[0] is raw or (isinstance(raw, bytes) and cached[0] == raw)):
            return cached[1]
        state = load_state(key, raw)
        if state is not None and state.status == "pending":
            self._parsed[key] = (raw, state)
        else:
            self._parsed.pop(key, None)
        return state

    def stored(self, state: JoinState, raw: Row) -> None:
        """``state`` was just written to the table as ``raw`` (its bytes, or itself)."""
        key = state.generation_id
        if state.status != "pending":
            self._parsed.pop(key, None)
            return
        self._parsed[key] = (raw, state)
        self._push(state.partition, key, self._due_at(state))

    def forget(self, key: str) -> None:
        """``key``'s state left the pending ones by a write the processor did not make itself (a reward's marker)."""
        self._parsed.pop(key, None)

    def due(self, bounds: Mapping[int, float]) -> list[JoinState]:
        """The pending states of the partitions in ``bounds`` due at or before their partition's bound; they
        stay queued (a state is dropped from the queue once the table no longer has it pending)."""
        if self._stale:
            self._rebuild()
        out: list[JoinState] = []
        for partition, bound in bounds.items():
            heap = self._heaps.get(partition)
            again: list[tuple[float, str]] = []
            while heap and heap[0][0] <= bound:
                queued, key = heapq.heappop(heap)
                if self._queued.get(key) != queued:
                    continue  # superseded by an earlier entry of the same generation
                del self._queued[key]
                raw = self._rows.get(key)
                if raw is None or not row_pending(raw):
                    continue  # decided since (its marker is not parsed: every reward's entry comes due once)
                state = self.parse(key, raw)
                if state is None or state.status != "pending":
                    continue
                at = self._due_at(state)
                if state.partition != partition or at > bound:
                    self._push(state.partition, key, at)
                    continue
                out.append(state)
                again.append((at, key))
            for at, key in again:
                self._push(partition, key, at)
        return out

    def _push(self, partition: int, key: str, at: float) -> None:
        queued = self._queued.get(key)
        if queued is not None and queued <= at:
            return  # the earlier entry comes first; when popped it is re-queued at the state's own time
        self._queued[key] = at
        heapq.heappush(self._heaps.setdefault(partition, []), (at, key))

    def _rebuild(self) -> None:
        """Index every pending row of the table (a row parsed before is not parsed again)."""
        parsed, self._parsed = self._parsed, {}
        self._heaps.clear()
        self._queued.clear()
        for key, raw in list(self._rows.items()):
            if not row_pending(raw):
                continue
            cached = parsed.get(key)
            same = cached is not None and (cached[0] is raw or (isinstance(raw, bytes) and cached[0] == raw))
            state = cached[1] if cached is not None and same else load_state(key, raw)
            if state is None or state.status != "pending":
                continue
            self._parsed[key] = (raw, state)
            self._push(state.partition, key, self._due_at(state))
        self._stale = False
