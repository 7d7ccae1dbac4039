"""The wiring of image tasks' images on this host: the local base images (``infra``) handed to the task image
builder (``workers``), which cannot import each other."""

from __future__ import annotations

import atexit
import functools
import sys
from collections.abc import Callable
from typing import Any

from schemas.errors import SandboxError
from schemas.settings import Settings
from schemas.tasks import PublicTask, Task
from workers.containers.task_host import ImageTaskHost, NoImageTaskHost
from workers.images.task_images import TaskImageError, ensure_prebuilt_image, ensure_task_image
from workers.overlays.host import OverlayHost
from workers.sandbox.docker_backend import docker_client


def task_image_source(settings: Settings, client: Any) -> Callable[[PublicTask | Task], str]:
    """``image_of(task)``: the tag of ``task``'s image on this host, built (or, from a registry, pulled) the
    first time; TaskImageError names why it cannot be had."""
    from infra.local.base_images import ensure_base_image

    local = settings.sandbox.task_images == "local"
    base_image: Callable[[str], str | None] = (
        functools.partial(ensure_base_image, settings, client) if local else functools.partial(_pulled, client)
    )
    lock_dir = settings.local.cache_dir / "task-images"

    def image_of(task: PublicTask | Task) -> str:
        environment = task.environment
        if environment is None:
            raise TaskImageError(f"task {task.task_id} is not an image task")
        if environment.context is not None and (local or environment.docker_image is None):
            built = ensure_task_image(
                client,
                environment.context.tar(),
                environment.context.sha256,
                build_timeout_s=environment.build_timeout_s,
                base_image=base_image,
                lock_dir=lock_dir,
                workdir=environment.workdir,
            )
            for trimmed in built.trimmed:
                print(f"{task.task_id}: warning: removed from its image's history (only HEAD's is kept): {trimmed}",
                      file=sys.stderr)  # fmt: skip
            return built.tag
        assert environment.docker_image is not None  # noqa: S101 - the task's schema: a context or an image
        return ensure_prebuilt_image(client, environment.docker_image, may_pull=not local)

    return image_of


def _pulled(client: Any, name: str) -> str | None:
    """A base image from the registry (pulled when absent): its id."""
    return ensure_prebuilt_image(client, name, may_pull=True)


def image_task_host(settings: Settings, role: str = "verifier") -> ImageTaskHost | NoImageTaskHost:
    """How ``role`` runs image tasks on this host: on the docker daemon, its steps and verification on overlays
    when ``RS_SANDBOX_BACKEND=process`` (``overlay_host``), or, with no daemon reachable, why not (said on stderr
    now; each image task's verdict is then a sandbox_error naming it, withheld, never a 0; an episode of one is
    refused at its open)."""
    try:
        client = docker_client(settings)
    except SandboxError as exc:
        reason = f"{exc}: image tasks run on a docker daemon (RS_DOCKER_HOST); start one"
        print(f"{role}: warning: {reason}", file=sys.stderr, flush=True)
        return NoImageTaskHost(reason)
    overlays = overlay_host(settings, client, role) if role in ("episode", "verifier") else None
    if overlays is not None:
        atexit.register(overlays.close)
    return ImageTaskHost(client, task_image_source(settings, client), overlays)


def overlay_host(settings: Settings, client: Any, who: str) -> OverlayHost | None:
    """The process backend's host for image tasks when ``RS_SANDBOX_BACKEND=process`` (the caller closes it);
    None on docker, or when this host cannot make one (needs root, bwrap and nsenter: said on stderr as ``who``'s
    warning), and image tasks then run in containers."""
    if settings.sandbox.backend != "process":
        return None
    try:
        return OverlayHost(settings, client)
    except SandboxError as exc:
        print(f"{who}: warning: image tasks run in containers: {exc}", file=sys.stderr, flush=True)
        return None
