"""Docker Engine from Debian (``docker.io``), started without a bridge network, and the sandbox image.

The bridge and iptables stay off: sandbox containers use ``network_mode="none"``, nothing else is needed,
and no traffic can leave loopback.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from infra.local.debian import ensure_commands
from infra.local.paths import PlatformPaths
from infra.local.service import Health, PortClaim, ProcessService, split_host_port
from schemas.caps import QUOTE_CHARS
from schemas.errors import PlatformError
from schemas.settings import Settings

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
DOCKERD_FLAGS = ("--bridge=none", "--iptables=false", "--ip6tables=false")
SANDBOX_PACKAGES = {"dockerd": "docker.io", "bwrap": "bubblewrap", "mmdebstrap": "mmdebstrap"}


class DockerService(ProcessService):
    """dockerd on the local socket, plus the locally built sandbox image."""

    name = "docker"
    uses_java = False

    def __init__(self, settings: Settings, paths: PlatformPaths) -> None:
        endpoint = settings.sandbox.docker_host or DEFAULT_SOCKET
        host, port = ("127.0.0.1", 0) if endpoint.startswith("unix://") else split_host_port(endpoint, 2375)
        super().__init__(settings, paths, host, port)

    @property
    def endpoint(self) -> str:
        return self._settings.sandbox.docker_host or DEFAULT_SOCKET

    def ports(self) -> list[PortClaim]:
        return []

    def installed(self) -> bool:
        return all(shutil.which(cmd) for cmd in SANDBOX_PACKAGES)

    def install(self) -> None:
        ensure_commands(SANDBOX_PACKAGES)

    def start(self) -> None:
        if self._process.pid() is not None or self._ping() is None:
            return
        if not self.endpoint.startswith("unix://"):
            raise PlatformError(f"Docker at {self.endpoint} does not answer; `up` only starts a local dockerd")
        if os.geteuid() != 0:
            raise PlatformError(
                "starting dockerd needs root: run `rewardstream up` as root, or start "
                f"`dockerd {' '.join(DOCKERD_FLAGS)}` yourself"
            )
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise PlatformError("dockerd not found: apt-get install docker.io")
        argv = [dockerd, *DOCKERD_FLAGS, f"--host={self.endpoint}"]
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
        self._process.start(argv, env=env, cwd=Path("/"))

    def _client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.endpoint, timeout=max(5, int(self._settings.local.health_timeout_s)))

    def _ping(self) -> str | None:
        """None when dockerd answers, else why not."""
        try:
            client = self._client()
        except Exception as exc:
            return f"Docker does not answer at {self.endpoint}: {_first_line(exc)}"
        try:
            client.ping()
        except Exception as exc:
            return f"Docker does not answer at {self.endpoint}: {_first_line(exc)}"
        finally:
            client.close()
        return None

    def ensure_sandbox_image(self) -> str:
        """Build the sandbox rootfs and image from Debian packages if missing; return the image tag."""
        from infra.local.sandbox_image import ensure_sandbox_image, ensure_sandbox_rootfs

        ensure_sandbox_rootfs(self._settings)
        client = self._client()
        try:
            return ensure_sandbox_image(self._settings, client)
        finally:
            client.close()

    def health(self) -> Health:
        details: dict[str, Any] = {"managed_pid": self._process.pid(), "image": self._settings.sandbox.image}
        if (reason := self._ping()) is not None:
            return Health(False, self.endpoint, reason, details)
        client = self._client()
        try:
            details["server_version"] = client.version().get("Version")
            present = bool(client.images.list(name=self._settings.sandbox.image))
        except Exception as exc:
            return Health(False, self.endpoint, f"Docker answered but failed: {_first_line(exc)}", details)
        finally:
            client.close()
        details["image_present"] = present
        if not present:
            reason = f"sandbox image {self._settings.sandbox.image} is not built: run `rewardstream up`"
            return Health(False, self.endpoint, reason, details)
        return Health(True, self.endpoint, None, details)

    def stop(self) -> bool:
        return self._process.stop(timeout_s=60.0)


def _first_line(exc: Exception) -> str:
    text = str(exc)
    return text.splitlines()[0][:QUOTE_CHARS] if text else type(exc).__name__
