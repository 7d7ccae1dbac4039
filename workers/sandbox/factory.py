"""Builds a sandbox backend from settings: the one place that knows how each backend is assembled.

It builds no image and no root filesystem: those are the platform's (``rewardstream up`` makes the local ones,
production bakes them), so a worker never runs a package manager. What is missing is an error saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

from schemas.backends import Backend
from schemas.errors import SandboxError
from schemas.settings import Settings
from workers.sandbox.api import Sandbox
from workers.sandbox.fleet_pace import FleetPace


def make_sandbox(
    settings: Settings,
    backend: Backend | None = None,
    *,
    rootfs: Path | None = None,
    image: str | None = None,
    toolchain_rootfs: Callable[[str], Path] | None = None,
    toolchain_image: Callable[[str], str] | None = None,
    fleet: FleetPace | None = None,
) -> Sandbox:
    """A ready backend over ``rootfs`` (process) or ``image`` (docker), by default the ones the settings name;
    the caller must ``close()`` it. Other toolchain families come from ``toolchain_rootfs``/``toolchain_image``
    (the caller's: the CLI hands in the local platform's builders), by default the baked trees and images the
    settings name, looked up on a family's first run. ``fleet``: a worker's share of the fleet's starts
    (``fleet_pace``), paced before every run starts."""
    chosen = backend or settings.sandbox.backend
    if chosen == "process":
        from workers.sandbox.process import ProcessSandbox

        root = rootfs or settings.sandbox_rootfs_path()
        if not (root / "usr" / "bin").is_dir():
            raise SandboxError(
                f"no sandbox root filesystem at {root}: run `rewardstream up` (it builds it) or set RS_SANDBOX_ROOTFS"
            )
        return ProcessSandbox(settings, root, toolchains=toolchain_rootfs, fleet=fleet)
    if chosen == "docker":
        from workers.sandbox.docker_backend import DockerSandbox, docker_client

        client = docker_client(settings)
        tag = image or settings.sandbox.image
        try:
            client.images.get(tag)
        except Exception as exc:  # docker.errors.ImageNotFound, or the daemon is unreachable
            raise SandboxError(
                f"sandbox image {tag} unavailable ({exc}): run `rewardstream up` (it builds it)"
            ) from exc
        return cast(Sandbox, DockerSandbox(settings, client, tag, toolchains=toolchain_image, fleet=fleet))
    raise SandboxError(f"unknown sandbox backend {chosen!r}")
