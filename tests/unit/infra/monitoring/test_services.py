"""Prometheus and Alertmanager as local services: loopback command lines, config beside the data, clear health."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from infra.local.paths import PlatformPaths
from infra.monitoring.config import Intervals, ScrapeTarget
from infra.monitoring.services import AlertmanagerService, PrometheusService
from schemas.errors import PlatformError


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_prometheus_listens_on_its_url_with_the_rules_copied_beside_its_config(tmp_path: Path) -> None:
    prometheus = PrometheusService("http://127.0.0.1:9490", PlatformPaths(tmp_path), 1.0)
    prometheus.configure([ScrapeTarget("executor", "http://127.0.0.1:9464/metrics")], None, Intervals())
    config = yaml.safe_load(prometheus.config.read_text())
    [rules] = config["rule_files"]
    assert Path(rules).parent == prometheus.data / "rules"
    assert "RewardstreamRoleDown" in Path(rules).read_text()
    argv = prometheus.argv("/usr/bin/prometheus")
    assert "--web.listen-address=127.0.0.1:9490" in argv
    assert f"--config.file={prometheus.config}" in argv


def test_alertmanager_has_no_cluster_listener(tmp_path: Path) -> None:
    alertmanager = AlertmanagerService("http://127.0.0.1:9493", PlatformPaths(tmp_path), 1.0)
    alertmanager.configure()
    argv = alertmanager.argv("/usr/bin/prometheus-alertmanager")
    assert "--cluster.listen-address=" in argv
    assert "--web.listen-address=127.0.0.1:9493" in argv
    assert (alertmanager.data / "alertmanager.yml").is_file()


def test_not_running_is_unhealthy_with_what_to_start(tmp_path: Path) -> None:
    health = PrometheusService(f"http://127.0.0.1:{_closed_port()}", PlatformPaths(tmp_path), 1.0).health()
    assert not health.healthy
    assert "rewardstream up --pipeline" in str(health.reason)


def test_a_port_another_program_holds_is_refused(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        service = PrometheusService(f"http://127.0.0.1:{port}", PlatformPaths(tmp_path), 1.0)
        with pytest.raises(PlatformError, match="RS_PROMETHEUS_URL"):
            service.start()
