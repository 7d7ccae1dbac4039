"""What every local service offers the platform: install, start, health, stop."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from infra.local.java import find_java
from infra.local.paths import PlatformPaths
from infra.local.process import ManagedProcess
from schemas.errors import PlatformError
from schemas.settings import Settings

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@dataclass(frozen=True)
class Health:
    """A service's state as ``rewardstream status`` reports it; ``reason`` says why in plain words."""

    healthy: bool
    endpoint: str
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    fatal: bool = False
    """Waiting will not help (e.g. the service rejects our credentials): ``up`` stops at once."""

    def as_json(self) -> dict[str, Any]:
        return {"healthy": self.healthy, "endpoint": self.endpoint, "reason": self.reason, **self.details}


@dataclass(frozen=True)
class PortClaim:
    """A port a local service listens on, and the setting that moves it."""

    label: str
    host: str
    port: int
    setting: str


class LocalService(Protocol):
    """One of the four services of the local platform."""

    name: str
    uses_java: bool

    def ports(self) -> list[PortClaim]:
        """Ports the service needs free before it starts."""
        ...

    def installed(self) -> bool:
        """True when ``install`` has nothing left to download."""
        ...

    @property
    def endpoint(self) -> str: ...

    def is_local(self) -> bool:
        """True when the endpoint is on loopback, so ``up`` may install and start it."""
        ...

    def install(self) -> None:
        """Download and unpack (idempotent, verified)."""
        ...

    def start(self) -> None:
        """Start the process if it is not running (does not wait for health)."""
        ...

    def health(self) -> Health: ...

    def started_by_us(self) -> int | None:
        """Pid of the process ``up`` started, if it is running."""
        ...

    def startup_failure(self) -> str | None:
        """Why a just-started process died (its log tail), or None while it lives."""
        ...

    def stop(self) -> bool: ...


class ProcessService:
    """Plumbing shared by the services ``up`` runs as local processes: pid file, log, loopback check."""

    name: str
    uses_java = True

    def __init__(self, settings: Settings, paths: PlatformPaths, host: str, port: int) -> None:
        self._settings = settings
        self._paths = paths
        self._host = host
        self._port = port
        self._process = ManagedProcess(
            name=self.name, pidfile=paths.run / f"{self.name}.pid", logfile=paths.logs / f"{self.name}.log"
        )

    def is_local(self) -> bool:
        return is_loopback(self._host)

    def ports(self) -> list[PortClaim]:
        """Ports the service needs free before it starts."""
        return []

    def _java_to_start(self) -> Path | None:
        """None when our process already runs; else check its ports are free and return the Java to run."""
        if self._process.pid() is not None:
            return None
        for claim in self.ports():
            require_port_free(claim.label, claim.host, claim.port, claim.setting)
        return find_java(self._settings.local.java_home)

    def started_by_us(self) -> int | None:
        return self._process.pid()

    def startup_failure(self) -> str | None:
        return self._process.exited_early()

    def stop(self) -> bool:
        return self._process.stop()


def split_host_port(endpoint: str, default_port: int) -> tuple[str, int]:
    """``host:port`` or a URL -> (host, port)."""
    text = endpoint if "://" in endpoint else f"//{endpoint}"
    parts = urlsplit(text)
    try:
        port = parts.port or default_port
    except ValueError as exc:
        raise PlatformError(f"bad port in endpoint {endpoint!r}") from exc
    return parts.hostname or "127.0.0.1", port


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def port_is_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_port_free(service: str, host: str, port: int, setting: str) -> None:
    """Fail with what to do when another program already holds a port the service needs."""
    if port_is_open(host, port):
        raise PlatformError(
            f"port {port} on {host} is taken by another program, so {service} cannot start there: "
            f"stop that program or choose another port with {setting}"
        )


def unreachable_reason(service: str, host: str, port: int) -> str | None:
    """A plain-words reason when nothing accepts connections at host:port, else None."""
    if port_is_open(host, port):
        return None
    return f"nothing listens on {host}:{port}: {service} is not running (start it with `rewardstream up`)"
