"""The generated Prometheus and Alertmanager configs: every target under job rewardstream with its role, and
valid for promtool (Debian's ``prometheus``; skipped only where it is absent outside CI)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.monitoring.config import Intervals, ScrapeTarget, alertmanager_config, prometheus_config
from infra.monitoring.rules import RULES

TARGETS = [
    ScrapeTarget("executor", "http://127.0.0.1:9464/metrics"),
    ScrapeTarget("rewards", "http://127.0.0.1:9468/metrics"),
    ScrapeTarget("gateway", "http://127.0.0.1:8080/metrics"),
    ScrapeTarget("judge", "https://judge.example:9443/custom"),
]


def test_each_target_is_labelled_with_its_role_under_one_job() -> None:
    config = prometheus_config(TARGETS, [RULES], "http://127.0.0.1:9493", Intervals(1.0, 2.0))
    scrapes = config["scrape_configs"]
    assert [(s["scheme"], s["metrics_path"]) for s in scrapes] == [("http", "/metrics"), ("https", "/custom")]
    statics = [static for s in scrapes for static in s["static_configs"]]
    assert {static["labels"]["role"]: static["targets"] for static in statics} == {
        "executor": ["127.0.0.1:9464"], "rewards": ["127.0.0.1:9468"], "gateway": ["127.0.0.1:8080"],
        "judge": ["judge.example:9443"],
    }  # fmt: skip
    assert all(s["honor_labels"] for s in scrapes)
    assert all(s["relabel_configs"] == [{"target_label": "job", "replacement": "rewardstream"}] for s in scrapes)
    assert config["global"] == {
        "scrape_interval": "1000ms",
        "scrape_timeout": "1000ms",
        "evaluation_interval": "2000ms",
    }
    assert config["alerting"]["alertmanagers"][0]["static_configs"] == [{"targets": ["127.0.0.1:9493"]}]
    assert "alerting" not in prometheus_config(TARGETS, [RULES], None, Intervals())


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must check the generated config: promtool is missing (apt-get install prometheus)")
        pytest.skip("promtool is missing: apt-get install prometheus")
    return found


def test_promtool_accepts_the_generated_config(tmp_path: Path) -> None:
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(prometheus_config(TARGETS, [RULES], "http://127.0.0.1:9493", Intervals())))
    result = subprocess.run([_promtool(), "check", "config", str(path)], capture_output=True, text=True,
                            check=False, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_alertmanager_config_sends_nothing_off_the_host() -> None:
    config = alertmanager_config()
    assert config["receivers"] == [{"name": "local"}]
    assert config["route"]["receiver"] == "local"
