"""The committed state of any episode, on whichever partition it lives: what a ``fork`` starts from.

Why read the changelog rather than the worker's table: a fork's new episode id hashes to any partition, so its
source is often on a partition another worker owns; and a fork may only start from a committed turn. Each
changelog partition is read once and then only from where the last read ended (``bus.changelog.catch_up``),
so a fork costs one short read per partition.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from workers.episodes.table import loads
from workers.episodes.turns import EpisodeState

#: Reads changelog ``partition`` from an offset onto a row dict; returns where to go on from.
CatchUp = Callable[[int, dict[str, bytes], int], int]


class CommittedEpisodes:
    """Thread-safe (one lookup at a time: forks are rare next to steps)."""

    def __init__(self, partitions: int, catch_up: CatchUp) -> None:
        self._partitions = partitions
        self._catch_up = catch_up
        self._rows: dict[int, dict[str, bytes]] = {p: {} for p in range(partitions)}
        self._next: dict[int, int] = dict.fromkeys(range(partitions), 0)
        self._lock = threading.Lock()

    def get(self, episode_id: str) -> EpisodeState | None:
        """The episode's committed state, or None if no partition has it (a row that is no state: None)."""
        with self._lock:
            for partition in range(self._partitions):
                rows = self._rows[partition]
                self._next[partition] = self._catch_up(partition, rows, self._next[partition])
                if episode_id in rows:
                    try:
                        return loads(rows[episode_id])
                    except ValueError:
                        return None
        return None
