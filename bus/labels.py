"""Prometheus label values kept bounded: what every role's counters share.

Why: Prometheus keeps one series per label set, so a label fed from events (a task id, a rule) must have a
bounded number of values. ``dataset`` is a task id's part before its first ``/`` (the convention of the shipped
converters: ``HumanEval/0``, ``swe/calc-add``). Here, below ``workers`` and ``streams``, so the reward
processor's integrity counters and the auditor's count datasets the same way.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

C_co = TypeVar("C_co", covariant=True)

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


class _Labelled(Protocol[C_co]):
    def labels(self, *values: str) -> C_co: ...


class Children(Generic[C_co]):
    """A metric's children by label values, each looked up once: ``labels()`` checks its arguments and takes a
    lock on every call, and the reward processor counts every reward on several metrics (about 10 µs a reward
    of the lookups). The same child ``labels()`` returns, so the series are the same; bounded as the label
    values are (every label here is)."""

    def __init__(self, metric: _Labelled[C_co]) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], C_co] = {}

    def __call__(self, *values: str) -> C_co:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child
