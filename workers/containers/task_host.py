"""What a worker needs of its host to run image tasks (their steps, their verification), wired by the CLI."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schemas.tasks import PublicTask, Task

if TYPE_CHECKING:
    from workers.overlays.host import OverlayHost


@dataclass(frozen=True, slots=True)
class ImageTaskHost:
    """What running image tasks needs of this host: a docker client and ``image_of(task) -> tag`` (the task's
    image, built the first time: the CLI wires the product's base images into it, ``cli.task_images``), and,
    on a process backend host, ``overlays``: episode steps then run on the image's unpacked tree under bubblewrap
    instead of in containers."""

    client: Any
    image_of: Callable[[PublicTask | Task], str]
    overlays: OverlayHost | None = None


@dataclass(frozen=True, slots=True)
class NoImageTaskHost:
    """This worker cannot run image tasks, and why (no docker daemon)."""

    reason: str
