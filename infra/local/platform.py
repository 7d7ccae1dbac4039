"""The local platform as a whole: ``up`` (install, start, wait healthy), ``down`` and ``status``.

Services whose endpoint is not on loopback are production clusters: they are only checked, never started.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from infra.local.docker_engine import DockerService
from infra.local.download import require_free_space
from infra.local.java import find_java
from infra.local.kafka import KafkaService
from infra.local.opensearch import OpenSearchService
from infra.local.paths import PlatformPaths
from infra.local.process import group_rss_kb
from infra.local.s3 import S3Service
from infra.local.service import Health, LocalService, require_port_free
from schemas.errors import PlatformError
from schemas.settings import Settings

Report = Callable[[str], None]

#: The local services, in the order ``up`` lists them (``down`` stops them in reverse).
SERVICE_NAMES = ("kafka", "opensearch", "s3", "docker")

COLD_INSTALL_MB = 1500
"""Free disk a first ``up`` needs: downloads (~350 MB), unpacked services, sandbox rootfs, data."""


@dataclass(frozen=True)
class Platform:
    """The four services of the local platform, built from one settings object."""

    settings: Settings
    paths: PlatformPaths
    kafka: KafkaService
    opensearch: OpenSearchService
    s3: S3Service
    docker: DockerService
    only: frozenset[str] | None = None
    """The services ``up``, ``down`` and ``status`` deal with (None: all four)."""

    @classmethod
    def from_settings(cls, settings: Settings, only: Collection[str] | None = None) -> Platform:
        """The platform these settings describe; ``only`` narrows it to some services by name."""
        paths = PlatformPaths(settings.local.cache_dir)
        if only is not None and (unknown := sorted(set(only) - set(SERVICE_NAMES))):
            raise PlatformError(f"no service named {', '.join(unknown)}: the services are {', '.join(SERVICE_NAMES)}")
        return cls(
            settings=settings,
            paths=paths,
            kafka=KafkaService(settings, paths),
            opensearch=OpenSearchService(settings, paths),
            s3=S3Service(settings, paths),
            docker=DockerService(settings, paths),
            only=None if only is None else frozenset(only),
        )

    @property
    def services(self) -> tuple[LocalService, ...]:
        every = (self.kafka, self.opensearch, self.s3, self.docker)
        return tuple(svc for svc in every if self.only is None or svc.name in self.only)

    def status(self) -> dict[str, Health]:
        """Health of every service, checked concurrently."""
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = dict(pool.map(lambda svc: (svc.name, svc.health()), self.services))
        for health in results.values():
            pid = health.details.get("managed_pid")
            if pid is not None:
                health.details["rss_mb"] = round(group_rss_kb(pid) / 1024, 1)
        return results

    def up(self, report: Report = lambda _msg: None) -> dict[str, Health]:
        """Start what is not running and wait until every service is healthy.

        Everything that can be checked before starting (credentials, remote endpoints, Java, free ports,
        free disk) is checked first, so a bad configuration fails in one line and starts nothing.
        """
        self.paths.ensure()
        current = self.status()
        pending = [svc for svc in self.services if not current[svc.name].healthy]
        self._preflight(pending, current)
        for svc in self.services:
            if svc not in pending:
                report(f"{svc.name}: already healthy at {svc.endpoint}")
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = {svc.name: pool.submit(self._bring_up, svc, report) for svc in pending}
        failures = []
        for name, future in futures.items():
            exc = future.exception()
            if exc is not None:
                failures.append(f"{name}: {exc}")
        if failures:
            raise PlatformError("; ".join(failures))
        if self.kafka in self.services:
            self.kafka.provision(report)  # auth mode: credentials, ACLs and topics, kept as the repo's table says
        if self.docker in self.services and self.docker.is_local():
            # Idempotent and quick when present: the process backend's rootfs may be missing even
            # when the image exists (e.g. a new cache dir).
            self.docker.ensure_sandbox_image()
        return self.status()

    def _preflight(self, pending: list[LocalService], current: dict[str, Health]) -> None:
        for svc in pending:
            health = current[svc.name]
            if health.fatal:
                raise PlatformError(f"{svc.name}: {health.reason}")
            if not svc.is_local():
                raise PlatformError(f"remote {svc.name} is unhealthy: {health.reason}")
        for svc in pending:
            if svc.started_by_us() is None:
                for claim in svc.ports():
                    require_port_free(claim.label, claim.host, claim.port, claim.setting)
        if any(svc.uses_java and svc.started_by_us() is None for svc in pending):
            find_java(self.settings.local.java_home)
        if any(not svc.installed() for svc in pending):
            require_free_space(self.paths.root, COLD_INSTALL_MB)

    def _bring_up(self, service: LocalService, report: Report) -> None:
        started = time.monotonic()
        if not service.installed():
            report(f"{service.name}: downloading and installing")
        service.install()
        service.start()
        if isinstance(service, DockerService):
            self._wait_for_docker_daemon(service)
            report("docker: building the sandbox rootfs and image if missing (first run: ~1 minute)")
            service.ensure_sandbox_image()
        self._wait_healthy(service)
        report(f"{service.name}: healthy at {service.endpoint} ({time.monotonic() - started:.1f}s)")

    def _wait_for_docker_daemon(self, service: DockerService) -> None:
        deadline = time.monotonic() + self.settings.local.startup_timeout_s
        while time.monotonic() < deadline:
            if service.health().details.get("server_version"):
                return
            if (failure := service.startup_failure()) is not None:
                raise PlatformError(f"dockerd exited during startup: {failure}")
            time.sleep(0.5)
        raise PlatformError(f"dockerd did not answer within {self.settings.local.startup_timeout_s:.0f}s")

    def _wait_healthy(self, service: LocalService) -> None:
        deadline = time.monotonic() + self.settings.local.startup_timeout_s
        health = service.health()
        while not health.healthy:
            if health.fatal:
                raise PlatformError(str(health.reason))
            if service.started_by_us() is None and (failure := service.startup_failure()) is not None:
                raise PlatformError(f"exited during startup; last log lines:\n{failure}")
            if time.monotonic() > deadline:
                raise PlatformError(f"not healthy after {self.settings.local.startup_timeout_s:.0f}s: {health.reason}")
            time.sleep(0.5)
            health = service.health()

    def down(self, report: Report = lambda _msg: None) -> list[str]:
        """Stop every process ``up`` started (and nothing else); return the names stopped."""
        stopped = []
        for service in reversed(self.services):
            pid = service.started_by_us()
            if service.stop():
                stopped.append(service.name)
                report(f"{service.name}: stopped (pid {pid})")
            else:
                report(f"{service.name}: not started by rewardstream, left alone")
        return stopped
