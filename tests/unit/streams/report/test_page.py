"""The page: every plot in its figure, nothing to fetch or run, every text from an event escaped."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import orjson

from streams.report.gather import gather
from streams.report.page import PLOTS, render
from tests.unit.report_events import Message, sample_run
from tests.unit.streams.report.test_gather import records

START = datetime(2026, 12, 5, tzinfo=UTC)


def test_every_plot_has_its_figure_in_page_order() -> None:
    page = render(gather("run-a", records(sample_run("run-a", START, generations=20))), now=START)
    ids = re.findall(r'<figure class="plot" id="plot-([a-z-]+)"><svg', page)
    assert ids == [plot_id for plot_id, _heading, _draw in PLOTS]
    assert "<h1>Run run-a</h1>" in page
    assert "made 2026-12-05 00:00:00 UTC" in page


def test_the_page_fetches_and_runs_nothing() -> None:
    page = render(gather("run-a", records(sample_run("run-a", START, generations=20))))
    assert "default-src 'none'" in page
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", page)
    assert not re.search(r"url\((?!#)", page)


def test_hostile_text_from_an_event_is_escaped() -> None:
    messages = []
    for m in sample_run("run-a", START, generations=3):
        data = orjson.loads(m.value)
        if m.role == "generations":
            data["policy_version"] = "<script>alert(1)</script>"
        messages.append(Message(m.role, m.key, orjson.dumps(data)))
    page = render(gather("run-a", records(messages)))
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
