"""``rewardstream report`` over a run's real Kafka topics, opened in headless chromium with networking off: every
plot rendered (its SVG present, with a size), no console error, no request made; a run without rewards is an
error naming it.

The run is written to the topics of a prefix of its own as the pipeline writes it (generations, executions with a
retried sandbox error, verdicts, rewards 1.1 with canaries and invalid ones), beside another run's messages.
``REPORT_SCREENSHOT=docs/report.png`` saves the page's screenshot for the docs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streams.report.page import PLOTS
from tests.integration.browser import chromium_or_skip, copy_if_asked, offline_page
from tests.integration.reward_env import REPO
from tests.unit.report_events import Message, sample_run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def publish(kafka_config: dict[str, str], prefix: str, messages: list[Message]) -> None:
    producer = Producer({**kafka_config, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    for message in messages:
        producer.produce(f"{prefix}{message.role}", key=message.key, value=message.value)
        producer.poll(0)
    assert producer.flush(30) == 0


def report(prefix: str, run_id: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RS_TOPIC_PREFIX": prefix, "PYTHONWARNINGS": "ignore"}
    args = [sys.executable, "-m", "rewardstream", "report", "--run-id", run_id, "--out", str(out)]
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=50, check=False)


def test_the_report_renders_every_plot_offline(
    kafka_config: dict[str, str], prefix: str, unique_name: str, tmp_path: Path
) -> None:
    chromium_or_skip()
    run_id = f"{unique_name}-run"
    start = datetime.now(UTC) - timedelta(minutes=40)
    publish(kafka_config, prefix, sample_run(run_id, start) + sample_run(f"{run_id}-other", start, generations=12))
    out = tmp_path / "report.html"

    made = report(prefix, run_id, out)

    assert made.returncode == 0, made.stderr
    page_text = out.read_text(encoding="utf-8")
    assert f"<h1>Run {run_id}</h1>" in page_text
    assert "<td>rewards</td><td>93</td>" in page_text  # the other run's rewards are not counted
    with offline_page(out) as page:
        sizes = page.script(
            "return arguments[0].map(id => { const svg = document.querySelector('#plot-' + id + ' > svg');"
            " if (!svg) return [id, 0, 0, 0]; const box = svg.getBoundingClientRect();"
            " return [id, box.width, box.height, svg.querySelectorAll('path, use, text').length]; })",
            [plot_id for plot_id, _heading, _draw in PLOTS],
        )
        blank = [s for s in sizes if not (s[1] > 100 and s[2] > 50 and s[3] > 10)]
        assert blank == [], f"plots not rendered (id, width, height, marks): {blank}"
        assert page.console() == []
        assert [url for url in page.requests() if not url.startswith("file://")] == []
        shot = tmp_path / "report.png"
        assert 10_000 < page.screenshot(shot) < 300_000
    copy_if_asked(shot, "REPORT_SCREENSHOT")


def test_a_run_without_rewards_is_an_error_naming_it(kafka_config: dict[str, str], prefix: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    made = report(prefix, "no-such-run", out)
    assert made.returncode == 2, made.stdout + made.stderr
    assert "rewardstream: error: run no-such-run: no reward events found (0 reward messages read)" in made.stderr
    assert not out.exists()
