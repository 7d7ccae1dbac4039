"""Helpers shared by the command modules: settings loading and output."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import pydantic

from schemas.codec import problems_of
from schemas.errors import ConfigError
from schemas.settings import Settings, env_name

if TYPE_CHECKING:
    from workers.sandbox.api import Sandbox
    from workers.sandbox.factory import Backend


T = TypeVar("T")


def load_settings() -> Settings:
    """Settings from the environment, with a one-line error naming the bad variable."""
    try:
        return Settings()
    except pydantic.ValidationError as exc:
        field, problem = problems_of(exc)[0]
        raise ConfigError(f"bad setting {env_name(field)}: {problem}") from None


def open_sandbox(settings: Settings, backend: Backend | None = None) -> Sandbox:
    """A sandbox backend over the local platform's root filesystem or image, built first if missing (what
    ``rewardstream up`` does); a rootfs named by RS_SANDBOX_ROOTFS is used as it is. Another toolchain
    family's tree or image is built the first time a run needs it (``infra.local.sandbox_image``), never
    by ``up``: the python path's first-run setup stays what it was."""
    import functools

    from infra.local.sandbox_image import (
        ensure_sandbox_image,
        ensure_sandbox_rootfs,
        ensure_toolchain_image,
        ensure_toolchain_rootfs,
    )
    from workers.sandbox.factory import make_sandbox

    chosen = backend or settings.sandbox.backend
    rootfs_of = functools.partial(_built, ensure_toolchain_rootfs, settings)
    if chosen == "process" and settings.sandbox.rootfs is None:
        return make_sandbox(settings, "process", rootfs=ensure_sandbox_rootfs(settings), toolchain_rootfs=rootfs_of)
    if chosen == "docker":
        from workers.sandbox.docker_backend import docker_client

        client = docker_client(settings)
        image_of = functools.partial(_built, ensure_toolchain_image, settings, client)
        return make_sandbox(settings, "docker", image=ensure_sandbox_image(settings, client), toolchain_image=image_of)
    return make_sandbox(settings, chosen, toolchain_rootfs=rootfs_of)


def _built(build: Callable[..., T], *args: Any) -> T:
    """``build(*args)`` with a platform failure as the sandbox's error (a run reports it as ``sandbox_error``)."""
    from schemas.errors import PlatformError, SandboxError

    try:
        return build(*args)
    except PlatformError as exc:
        raise SandboxError(f"cannot build the toolchain: {exc}") from exc


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")
    sys.stdout.flush()
