"""Helpers shared by the command modules: settings loading and output."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import orjson
import pydantic

from schemas.codec import problems_of
from schemas.errors import ConfigError
from schemas.settings import Settings, env_name

if TYPE_CHECKING:
    from workers.sandbox.api import Sandbox
    from workers.sandbox.factory import Backend


def load_settings() -> Settings:
    """Settings from the environment, with a one-line error naming the bad variable."""
    try:
        return Settings()
    except pydantic.ValidationError as exc:
        field, problem = problems_of(exc)[0]
        raise ConfigError(f"bad setting {env_name(field)}: {problem}") from None


def open_sandbox(settings: Settings, backend: Backend | None = None) -> Sandbox:
    """A sandbox backend over the local platform's root filesystem or image, built first if missing (what
    ``rewardstream up`` does); a rootfs named by RS_SANDBOX_ROOTFS is used as it is."""
    from infra.local.sandbox_image import ensure_sandbox_image, ensure_sandbox_rootfs
    from workers.sandbox.factory import make_sandbox

    chosen = backend or settings.sandbox_backend
    if chosen == "process" and settings.sandbox_rootfs is None:
        return make_sandbox(settings, "process", rootfs=ensure_sandbox_rootfs(settings))
    if chosen == "docker":
        from workers.sandbox.docker_backend import docker_client

        return make_sandbox(settings, "docker", image=ensure_sandbox_image(settings, docker_client(settings)))
    return make_sandbox(settings, chosen)


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")
    sys.stdout.flush()
