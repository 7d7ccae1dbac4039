"""Builds a sandbox backend from settings: the one place that knows how each backend is assembled."""

from __future__ import annotations

from typing import Literal, cast

from schemas.errors import SandboxError
from schemas.settings import Settings
from workers.sandbox.api import Sandbox

Backend = Literal["process", "docker"]


def make_sandbox(settings: Settings, backend: Backend | None = None) -> Sandbox:
    """Return a ready backend (rootfs/image built if missing); the caller must ``close()`` it."""
    from infra.local.sandbox_image import ensure_sandbox_image, ensure_sandbox_rootfs

    chosen = backend or settings.sandbox_backend
    if chosen == "process":
        from workers.sandbox.process import ProcessSandbox

        return ProcessSandbox(settings, ensure_sandbox_rootfs(settings))
    if chosen == "docker":
        from workers.sandbox.docker_backend import DockerSandbox, docker_client

        client = docker_client(settings)
        image = ensure_sandbox_image(settings, client)
        return cast(Sandbox, DockerSandbox(settings, client, image))
    raise SandboxError(f"unknown sandbox backend {chosen!r}")
