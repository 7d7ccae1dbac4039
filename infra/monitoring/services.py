"""Prometheus and Alertmanager as local processes (Debian's ``prometheus`` and ``prometheus-alertmanager``), on
loopback, tracked by pid files beside the other services', as ``infra/local`` runs Kafka and OpenSearch.

Why not the packages' own system services: those listen on every address, share one data directory per host,
and outlive ``rewardstream down``; these belong to one cache dir and stop with it.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from infra.local.paths import PlatformPaths
from infra.local.process import ManagedProcess
from infra.local.service import Health, is_loopback, split_host_port, unreachable_reason
from infra.monitoring.config import Intervals, ScrapeTarget, alertmanager_config, prometheus_config
from infra.monitoring.rules import RULES
from schemas.errors import PlatformError

#: Commands and the Debian packages that install them.
PACKAGES = {"prometheus": "prometheus", "prometheus-alertmanager": "prometheus-alertmanager"}


class MonitoringService:
    """One HTTP service run from a Debian binary: config in its data dir, ready when ``/-/ready`` answers 200."""

    name: str
    command: str

    def __init__(self, url: str, paths: PlatformPaths, health_timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self.host, self.port = split_host_port(url, 80)
        self.data = paths.data / self.name
        self._timeout = health_timeout_s
        self._process = ManagedProcess(
            name=self.name, pidfile=paths.run / f"{self.name}.pid", logfile=paths.logs / f"{self.name}.log"
        )

    def is_local(self) -> bool:
        return is_loopback(self.host)

    def argv(self, binary: str) -> list[str]:
        raise NotImplementedError

    def start(self) -> bool:
        """Start it unless ours runs; False when it already ran. A port another program holds is an error."""
        if self._process.pid() is not None:
            return False
        if unreachable_reason(self.name, self.host, self.port) is None:
            setting = f"RS_{self.name.upper()}_URL"
            raise PlatformError(
                f"port {self.port} on {self.host} is taken by another program, so {self.name} cannot start there: "
                f"stop it or choose another URL with {setting}"
            )
        binary = shutil.which(self.command)
        if binary is None:
            raise PlatformError(f"{self.command} is missing: apt-get install {PACKAGES[self.command]}")
        self.data.mkdir(parents=True, exist_ok=True)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        self._process.start(self.argv(binary), env=env, cwd=self.data)
        return True

    def health(self) -> Health:
        details: dict[str, Any] = {"managed_pid": self._process.pid()}
        if self.is_local() and (reason := unreachable_reason(self.name, self.host, self.port)):
            return Health(False, self.url, reason.replace("`rewardstream up`", "`rewardstream up --pipeline`"), details)
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=self._timeout) as response:  # noqa: S310
                ready = response.status == 200
        except (urllib.error.URLError, OSError) as exc:
            return Health(False, self.url, f"{self.name} at {self.url} is not ready: {exc}", details)
        return Health(ready, self.url, None if ready else f"{self.name} at {self.url} is not ready", details)

    def started_by_us(self) -> int | None:
        return self._process.pid()

    def startup_failure(self) -> str | None:
        return self._process.exited_early()

    def stop(self) -> bool:
        return self._process.stop(timeout_s=30.0)


class PrometheusService(MonitoringService):
    """Prometheus scraping the pipeline's processes with the repo's rules loaded; its TSDB in the cache dir."""

    name = "prometheus"
    command = "prometheus"

    def __init__(self, url: str, paths: PlatformPaths, health_timeout_s: float, retention: str = "7d") -> None:
        super().__init__(url, paths, health_timeout_s)
        self.config = self.data / "prometheus.yml"
        self.retention = retention

    def configure(
        self, targets: list[ScrapeTarget], alertmanager: str | None, intervals: Intervals, rules: Path = RULES
    ) -> None:
        """Write the config and a copy of the rules beside it (a running Prometheus reads them at a reload)."""
        (self.data / "rules").mkdir(parents=True, exist_ok=True)
        copy = self.data / "rules" / rules.name
        copy.write_text(rules.read_text())
        config = prometheus_config(targets, [copy], alertmanager, intervals)
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))

    def reload(self) -> None:
        """Make a running Prometheus read its config and rules again."""
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")  # noqa: S310 - our loopback one
        try:
            with urllib.request.urlopen(request, timeout=self._timeout):  # noqa: S310 - our loopback Prometheus
                pass
        except (urllib.error.URLError, OSError) as exc:
            raise PlatformError(f"Prometheus at {self.url} did not reload its config: {exc}") from exc

    def argv(self, binary: str) -> list[str]:
        return [
            binary, f"--config.file={self.config}", f"--storage.tsdb.path={self.data / 'tsdb'}",
            f"--storage.tsdb.retention.time={self.retention}", f"--web.listen-address={self.host}:{self.port}",
            "--web.enable-lifecycle",
        ]  # fmt: skip


class AlertmanagerService(MonitoringService):
    """Alertmanager receiving the local Prometheus' alerts; clustering off (one node, nothing off the host)."""

    name = "alertmanager"
    command = "prometheus-alertmanager"

    def configure(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        (self.data / "alertmanager.yml").write_text(yaml.safe_dump(alertmanager_config(), sort_keys=False))

    def argv(self, binary: str) -> list[str]:
        return [
            binary, f"--config.file={self.data / 'alertmanager.yml'}", f"--storage.path={self.data / 'store'}",
            f"--web.listen-address={self.host}:{self.port}", "--cluster.listen-address=",
        ]  # fmt: skip
