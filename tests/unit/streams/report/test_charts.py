"""Every plot renders to an inline SVG element, with data and without it."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime

from streams.report import charts
from streams.report.gather import gather
from tests.unit.report_events import sample_run
from tests.unit.streams.report.test_gather import records

START = datetime(2026, 12, 5, tzinfo=UTC)


def test_each_plot_is_an_svg_element_with_text_kept_as_text() -> None:
    report = gather("run-a", records(sample_run("run-a", START, generations=30)))
    drawn = [
        charts.distribution(report.by("task_id"), "task"),
        charts.latency(report),
        charts.outcomes(report),
        charts.integrity(report),
        charts.gap(report),
        charts.infra(report),
        charts.slowest(report),
    ]
    for svg in drawn:
        assert svg.startswith("<svg")
        assert svg.rstrip().endswith("</svg>")
        assert "<!DOCTYPE" not in svg
        assert not re.search(r"""(href|src)\s*=\s*["'](?!#)|url\((?!#)""", svg)  # nothing to fetch
    assert "HumanEval/3" in drawn[0]  # svg.fonttype none: labels stay text
    assert "exit_call" in drawn[3]


def test_a_plot_without_data_says_so() -> None:
    report = gather("run-a", records(sample_run("run-a", START, generations=4)))
    empty = replace(report, latency=(), slowest=(), hack_flags={}, warn_flags={}, gap_by_task={}, infra_errors={})
    assert "no latency" in charts.latency(empty)
    assert "no hack flags" in charts.integrity(empty)
    assert "no reward passed its public tests" in charts.gap(empty)
    assert "no infrastructure errors" in charts.infra(empty)
    assert "no latency" in charts.slowest(empty)


def test_only_the_largest_groups_are_drawn() -> None:
    groups = {f"t{i:02}": [0.0] * i for i in range(1, 40)}
    kept = charts.largest_groups(groups, limit=3)
    assert list(kept) == ["t37", "t38", "t39"]
    assert f"({charts.MAX_GROUPS} of 39 with most rewards shown)" in charts.distribution(groups, "task")


def test_the_same_report_draws_the_same_svg() -> None:
    report = gather("run-a", records(sample_run("run-a", START, generations=10)))
    assert charts.outcomes(report) == charts.outcomes(report)


def test_a_dollar_in_an_event_text_is_drawn_as_itself() -> None:
    svg = charts.distribution({"a$\\frac{$b": [1.0], "step $5": [0.0]}, "policy version")  # math mode would raise
    assert "frac" in svg
