"""Helpers shared by the command modules: settings loading and output."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import pydantic

from schemas.backends import BACKENDS, Backend
from schemas.codec import problems_of
from schemas.errors import ConfigError
from schemas.settings import Settings, env_name, unknown_variables

if TYPE_CHECKING:
    from workers.sandbox.api import Sandbox


T = TypeVar("T")
#: Characters of a timestamp a table shows: to the millisecond (``2026-01-02T03:04:05.678``), no zone.
TIME_CHARS = 23
#: Unexpected outcomes a demo lists (its summary says how many there were).
PROBLEMS_SHOWN = 20


#: What ``load_settings`` has warned of in this process (each variable once).
_WARNED: set[str] = set()


def load_settings() -> Settings:
    """Settings from the environment, with a one-line error naming the bad variable, and a warning on stderr
    for each ``RS_*`` variable that is no setting (a misspelt one would otherwise be ignored silently)."""
    for said in unknown_variables(os.environ):
        if said not in _WARNED:
            _WARNED.add(said)
            print(f"rewardstream: warning: {said}", file=sys.stderr, flush=True)
    try:
        return Settings()
    except pydantic.ValidationError as exc:
        field, problem = problems_of(exc)[0]
        raise ConfigError(f"bad setting {env_name(field)}: {problem}") from None


def configure_logging(level: str | None = None) -> None:
    """Log lines of a long-running command to stderr, one format for every service: ``level`` by name, else
    debug when RS_DEBUG is set, else info."""
    chosen = level.upper() if level is not None else ("DEBUG" if os.environ.get("RS_DEBUG") else "INFO")
    logging.basicConfig(level=chosen, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def backend_option(value: str | None) -> Backend | None:
    """A ``--backend`` value checked (None: the settings decide)."""
    if value is None:
        return None
    for backend in BACKENDS:
        if value == backend:
            return backend
    raise ConfigError(f"--backend must be process or docker, not {value!r}")


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
