"""The episode worker's state table: the ``EpisodeState`` of every episode of the partitions it owns.

Why a table restored from a changelog: the worker is stateless, so an episode's committed state is a row of a
compacted topic (keyed by ``episode_id``, co-partitioned with ``rs.actions``) written in the transaction of
the action that made it; on each assignment the partition's rows are read back (read_committed: an aborted
step's row never shows). Between a step and its commit the table holds that step's state already, so the
episode's next action (handled once the step finished, see the worker loop) builds on it; should the
transaction abort, the loop re-assigns the partition and the table is restored again. Each assignment has its
own epoch: a run from an earlier one can neither read nor write the current rows.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import TypeAdapter, ValidationError

from schemas.errors import RewardstreamError
from workers.episodes.turns import EpisodeState
from workers.handler import Source

log = logging.getLogger(__name__)

_ROWS: TypeAdapter[EpisodeState] = TypeAdapter(EpisodeState)


class StaleRunError(RewardstreamError):
    """The run's partition was revoked or re-assigned since its message was read; its outcome is dropped."""


def dumps(state: EpisodeState) -> bytes:
    """A changelog row."""
    return _ROWS.dump_json(state)


def loads(data: bytes) -> EpisodeState:
    """The state a changelog row holds; ValueError if it is none."""
    try:
        return _ROWS.validate_json(data)
    except ValidationError as exc:
        raise ValueError(str(exc)) from exc


@dataclass(eq=False)
class _Partition:
    epoch: int
    states: dict[str, EpisodeState]


class EpisodeTable:
    """Thread-safe; ``restore(partition)`` reads a changelog partition's committed rows (``bus.changelog``)."""

    def __init__(self, restore: Callable[[int], Mapping[str, bytes]]) -> None:
        self._restore = restore
        self._parts: dict[int, _Partition] = {}
        self._lock = threading.Lock()

    def assigned(self, _topic: str, partition: int, epoch: int) -> None:
        """Restore ``partition`` (a row that is no state is logged and left out: it cannot be acted on)."""
        states: dict[str, EpisodeState] = {}
        for key, value in self._restore(partition).items():
            try:
                states[key] = loads(value)
            except ValueError as exc:
                log.error("episode table partition %d: ignoring row %r, not an episode state: %s", partition, key, exc)
        with self._lock:
            self._parts[partition] = _Partition(epoch, states)
        log.info("episode table partition %d restored: %d episodes", partition, len(states))

    def revoked(self, _topic: str, partition: int) -> None:
        with self._lock:
            self._parts.pop(partition, None)

    def get(self, source: Source, episode_id: str) -> EpisodeState | None:
        """The episode's latest state in ``source``'s assignment (committed, or made by a step not yet
        committed); StaleRunError if that assignment is gone."""
        with self._lock:
            return self._live(source.partition, source.epoch).states.get(episode_id)

    def put(self, source: Source, state: EpisodeState) -> None:
        """Record the state a step made (its changelog row is in the same transaction as its observation)."""
        self.put_at(source.partition, source.epoch, state)

    def put_at(self, partition: int, epoch: int, state: EpisodeState) -> None:
        """``put`` for what no message made (a timer's end of an episode)."""
        with self._lock:
            self._live(partition, epoch).states[state.episode_id] = state

    def ended(self, partition: int, epoch: int) -> list[EpisodeState]:
        """The states of the partition's episodes that have ended."""
        with self._lock:
            return [state for state in self._live(partition, epoch).states.values() if state.ended is not None]

    def forget_at(self, partition: int, epoch: int, episode_id: str) -> None:
        """Drop an ended episode's row (its changelog tombstone is in the same transaction)."""
        with self._lock:
            self._live(partition, epoch).states.pop(episode_id, None)

    def running(self, partition: int, epoch: int) -> list[EpisodeState]:
        """The states of the partition's episodes that have not ended."""
        with self._lock:
            return [state for state in self._live(partition, epoch).states.values() if state.ended is None]

    def _live(self, partition: int, epoch: int) -> _Partition:
        part = self._parts.get(partition)
        if part is None or part.epoch != epoch:
            raise StaleRunError(f"partition {partition} was re-assigned since this run began")
        return part
