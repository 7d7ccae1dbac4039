"""Bounded label values, and label children looked up once."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from bus.labels import OTHER, BoundedLabel, Children, dataset_of


def test_a_label_keeps_its_first_values_then_counts_the_rest_as_other() -> None:
    label = BoundedLabel(2)
    assert [label(v) for v in ("a", "b", "c", "a")] == ["a", "b", OTHER, "a"]
    assert dataset_of("HumanEval/0") == "HumanEval"
    assert dataset_of("plain") == "plain"


def test_children_are_the_metrics_own_and_count_in_its_series() -> None:
    registry = CollectorRegistry()
    counter = Counter("c", "a counter", ("role", "outcome"), registry=registry)
    children = Children(counter)
    assert children("rewards", "complete") is counter.labels("rewards", "complete")
    assert children("rewards", "complete") is children("rewards", "complete")
    children("rewards", "complete").inc()
    counter.labels("rewards", "complete").inc()
    assert registry.get_sample_value("c_total", {"role": "rewards", "outcome": "complete"}) == 2.0
