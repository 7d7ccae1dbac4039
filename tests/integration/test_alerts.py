"""The rules in a real Prometheus (Debian's) over a real role: a poison message fires RewardstreamDeadLetters; kill
the role, and RewardstreamRoleDown is pending, then firing, in Prometheus, in Alertmanager and in
``rewardstream status`` (``--json`` and text).

Our own Prometheus and Alertmanager on free loopback ports, a copy of the rules with ``for:`` capped at 2 s and
1 s scrape and evaluation intervals; the shared services are never started or stopped here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from bus.clients import make_producer
from infra.monitoring.config import Intervals, ScrapeTarget
from infra.monitoring.rules import with_short_for
from infra.monitoring.services import AlertmanagerService, PrometheusService
from tests.integration.prometheus_env import free_port as _free_port
from tests.integration.prometheus_env import get_json as _get
from tests.integration.prometheus_env import wait_for as _wait

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FOR_S = 2


def _active(prometheus: PrometheusService, name: str) -> list[dict[str, Any]]:
    alerts = _get(f"{prometheus.url}/api/v1/alerts")["data"]["alerts"]
    return [a for a in alerts if a["labels"].get("alertname") == name]


def _role_down(prometheus: PrometheusService) -> list[dict[str, Any]]:
    return _active(prometheus, "RewardstreamRoleDown")


def _status(prometheus: PrometheusService, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RS_PROMETHEUS_URL": prometheus.url, "RS_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "rewardstream", "status", *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_a_dead_letter_and_a_killed_role_fire_in_prometheus_alertmanager_and_status(
    scraped_indexer: tuple[subprocess.Popen[bytes], int],
    indexer_topics: str,
    kafka_config: dict[str, str],
    own_monitoring: tuple[PrometheusService, AlertmanagerService],
    tmp_path: Path,
) -> None:
    proc, port = scraped_indexer
    prometheus, alertmanager = own_monitoring
    rules = with_short_for(tmp_path / "rules.yml", FOR_S)
    targets = [ScrapeTarget("indexer", f"http://127.0.0.1:{port}/metrics")]
    alertmanager.configure()
    assert alertmanager.start()
    prometheus.configure(targets, alertmanager.url, Intervals(scrape_s=1.0, evaluation_s=1.0), rules)
    assert prometheus.start()
    _wait("ready Prometheus", lambda: prometheus.health().healthy and alertmanager.health().healthy)

    query = urllib.parse.quote('up{job="rewardstream",role="indexer"}')
    _wait("scrape of the live indexer", lambda: [
        r for r in _get(f"{prometheus.url}/api/v1/query?query={query}")["data"]["result"] if r["value"][1] == "1"
    ])  # fmt: skip
    # Before the first scrape nothing of rewardstream is known (RoleDown's "all" branch, for 2 s only here); with
    # the live role scraped and the rules evaluated again, no RoleDown is active.
    _wait("no RoleDown while the role lives", lambda: _role_down(prometheus) == [])
    quiet = json.loads(_status(prometheus, tmp_path, "--json").stdout)
    assert quiet["services"]["prometheus"]["healthy"] is True
    assert [a for a in quiet["alerts"] if a["name"] == "RewardstreamRoleDown"] == []

    assert _active(prometheus, "RewardstreamDeadLetters") == []
    producer = make_producer(kafka_config)
    producer.produce(f"{indexer_topics}logs", key=b"poison", value=b"not a log record")
    assert producer.flush(30) == 0
    [dead] = _wait("RewardstreamDeadLetters", lambda: _active(prometheus, "RewardstreamDeadLetters"))
    assert (dead["labels"]["role"], dead["labels"]["reason"]) == ("indexer", "DecodeError")
    listed = json.loads(_status(prometheus, tmp_path, "--json").stdout)["alerts"]
    assert [a["labels"] for a in listed if a["name"] == "RewardstreamDeadLetters"] == [
        {"role": "indexer", "reason": "DecodeError", "severity": "warning"}
    ]

    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    killed_at = time.monotonic()
    pending = _wait("RoleDown pending or firing", lambda: _role_down(prometheus))
    assert pending[0]["labels"]["role"] == "indexer"
    _wait("RoleDown firing", lambda: [a for a in _role_down(prometheus) if a["state"] == "firing"])
    fired_s = time.monotonic() - killed_at
    print(f"\nRoleDown firing {fired_s:.1f}s after the kill (scrape and evaluation every 1 s, for: {FOR_S}s)")

    status = _status(prometheus, tmp_path, "--json")
    report = json.loads(status.stdout)
    assert report["services"]["prometheus"] == {**report["services"]["prometheus"], "healthy": True,
                                                "endpoint": prometheus.url}  # fmt: skip
    [alert] = [a for a in report["alerts"] if a["name"] == "RewardstreamRoleDown"]
    assert set(alert) == {"name", "state", "labels", "since"}
    assert alert["state"] == "firing"
    assert alert["labels"] == {"role": "indexer", "severity": "critical"}
    assert alert["since"]
    text = _status(prometheus, tmp_path).stdout
    assert "RewardstreamRoleDown" in text
    assert "role=indexer" in text

    def in_alertmanager() -> list[dict[str, Any]]:
        got = _get(f"{alertmanager.url}/api/v2/alerts")
        return [a for a in got if a["labels"].get("alertname") == "RewardstreamRoleDown"]

    [received] = _wait("RoleDown in Alertmanager", in_alertmanager)
    assert received["labels"]["role"] == "indexer"


@pytest.mark.usefixtures("own_monitoring")  # skips (outside CI) where the Debian packages are missing
def test_the_pipeline_monitoring_scrapes_every_role_and_starts_once(tmp_path: Path) -> None:
    """``Monitoring`` as ``up --pipeline`` runs it, on its own cache dir and ports with no pipeline running: every
    one of the eight roles is a target, each without a live member (RoleDown pending for each); a second start
    reloads the running Prometheus; stop stops both by their pids."""
    from rewardstream.monitoring import Monitoring
    from schemas.settings import Settings

    settings = Settings().model_copy(update={
        "cache_dir": tmp_path / "pipeline-cache", "metrics_port": _free_port(), "gateway_port": _free_port(),
        "prometheus_url": f"http://127.0.0.1:{_free_port()}", "alertmanager_url": f"http://127.0.0.1:{_free_port()}",
    })  # fmt: skip
    monitoring = Monitoring(settings, Intervals(scrape_s=1.0, evaluation_s=1.0))
    said: list[str] = []
    try:
        monitoring.start(report=said.append)
        assert [line.split(":")[0] for line in said] == ["alertmanager", "prometheus"]
        roles = {"executor", "verifier", "judge", "indexer", "rewards", "episode", "auditor", "gateway"}

        def pending_roles() -> bool:
            return {a["labels"].get("role") for a in _role_down(monitoring.prometheus)} == roles

        _wait("RoleDown for each of the eight roles", pending_roles)
        said.clear()
        monitoring.start(report=said.append)
        assert said == [f"alertmanager: already running at {monitoring.alertmanager.url}",
                        f"prometheus: already running at {monitoring.prometheus.url}"]  # fmt: skip
        pids = [monitoring.prometheus.started_by_us(), monitoring.alertmanager.started_by_us()]
    finally:
        stopped = monitoring.stop()
    assert stopped == ["prometheus", "alertmanager"]
    assert None not in pids
    # Stopped means the group is gone (a zombie counts as gone); its reaper thread removes the zombie a moment later.
    _wait("both processes reaped", lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), timeout_s=10.0)
