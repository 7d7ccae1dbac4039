"""Prometheus label values kept bounded: what every role's counters share.

Why: Prometheus keeps one series per label set, so a label fed from events (a task id, a rule) must have a
bounded number of values. ``dataset`` is a task id's part before its first ``/`` (the convention of the shipped
converters: ``HumanEval/0``, ``swe/calc-add``). Here, below ``workers`` and ``streams``, so the reward
processor's integrity counters and the auditor's count datasets the same way.
"""

from __future__ import annotations

#: What a capped label's later values are counted as.
OTHER = "other"
#: Distinct datasets a counter keeps before further ones are counted as ``other``.
MAX_DATASETS = 32


class BoundedLabel:
    """A label's values, capped: the first ``limit`` distinct ones are kept, later ones become ``other``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self.limit:
            return OTHER
        self._seen.add(value)
        return value


def dataset_of(task_id: str) -> str:
    """The dataset a task id names by convention (its part before the first ``/``; the id itself without one)."""
    return task_id.split("/", 1)[0]
