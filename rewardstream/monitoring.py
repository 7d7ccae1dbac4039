"""The pipeline's monitoring on one machine: Prometheus scraping every pipeline process with the repo's rules,
and Alertmanager; ``up --pipeline`` starts them after the pipeline, ``down`` stops them, ``status`` reads them.

The scrape targets come from ``pipeline_processes``, the same source that gives each process its port.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from infra.local.debian import ensure_commands
from infra.local.paths import PlatformPaths
from infra.local.service import Health
from infra.monitoring.alerts import active_alerts
from infra.monitoring.config import Intervals, ScrapeTarget
from infra.monitoring.services import PACKAGES, AlertmanagerService, MonitoringService, PrometheusService
from rewardstream.pipeline import pipeline_processes
from schemas.errors import PlatformError
from schemas.settings import Settings

#: A pipeline process's name -> the role its metrics carry (the reward processor's say "rewards").
ROLE_OF = {"reward": "rewards"}


def scrape_targets(settings: Settings) -> list[ScrapeTarget]:
    """Every pipeline process's /metrics: the workers on their ports, the gateway on its own."""
    targets = []
    for proc in pipeline_processes(settings):
        role = ROLE_OF.get(proc.name, proc.name)
        if proc.endpoint is not None:
            targets.append(ScrapeTarget(role, f"{proc.endpoint}/metrics"))
        elif proc.metrics_port is not None:
            targets.append(ScrapeTarget(role, f"http://{settings.worker.metrics_host}:{proc.metrics_port}/metrics"))
    return targets


class Monitoring:
    """Start, stop and read the local Prometheus and Alertmanager."""

    def __init__(self, settings: Settings, intervals: Intervals | None = None) -> None:
        paths = PlatformPaths(settings.local.cache_dir)
        timeout = settings.local.health_timeout_s
        self._settings = settings
        self._intervals = intervals or Intervals()
        self.prometheus = PrometheusService(settings.local.prometheus_url, paths, timeout)
        self.alertmanager = AlertmanagerService(settings.local.alertmanager_url, paths, timeout)

    def start(self, report: Callable[[str], None] = lambda _msg: None) -> None:
        """Alertmanager, then Prometheus (config rewritten; a running one reloads it); wait until both are ready.
        A Prometheus not on loopback is someone else's: only checked."""
        if not self.prometheus.is_local():
            health = self.prometheus.health()
            if not health.healthy:
                raise PlatformError(f"remote prometheus is unhealthy: {health.reason}")
            return
        ensure_commands(PACKAGES)
        alertmanager = self.alertmanager.url if self.alertmanager.is_local() else self._settings.local.alertmanager_url
        self.prometheus.configure(scrape_targets(self._settings), alertmanager, self._intervals)
        services: list[MonitoringService] = [self.prometheus]
        if self.alertmanager.is_local():
            self.alertmanager.configure()
            services.insert(0, self.alertmanager)
        for service in services:
            if service.start():
                self._wait_ready(service)
                report(f"{service.name}: running at {service.url} (pid {service.started_by_us()})")
            else:
                if service is self.prometheus:
                    self.prometheus.reload()
                report(f"{service.name}: already running at {service.url}")

    def _wait_ready(self, service: MonitoringService) -> None:
        deadline = time.monotonic() + self._settings.local.startup_timeout_s
        while not (health := service.health()).healthy:
            if (failure := service.startup_failure()) is not None:
                raise PlatformError(f"{service.name} exited during startup; last log lines:\n{failure}")
            if time.monotonic() > deadline:
                raise PlatformError(f"{service.name} not ready: {health.reason}")
            time.sleep(0.2)

    def stop(self, report: Callable[[str], None] = lambda _msg: None) -> list[str]:
        """Stop what ``start`` started (Prometheus first); anything else is left alone."""
        stopped = []
        for service in (self.prometheus, self.alertmanager):
            pid = service.started_by_us()
            if service.stop():
                stopped.append(service.name)
                report(f"{service.name}: stopped (pid {pid})")
        return stopped

    def status(self) -> tuple[Health, list[dict[str, Any]]]:
        """Prometheus' health and its pending or firing alerts (none when it does not answer)."""
        health = self.prometheus.health()
        if not health.healthy:
            return health, []
        try:
            return health, active_alerts(self.prometheus.url, self._settings.local.health_timeout_s)
        except PlatformError as exc:
            return Health(False, health.endpoint, str(exc), health.details), []
