"""What a worker needs of its host to run image tasks (their steps, their verification), wired by the CLI."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemas.tasks import PublicTask, Task


@dataclass(frozen=True, slots=True)
class ImageTaskHost:
    """What running image tasks needs of this host: a docker client and ``image_of(task) -> tag`` (the task's
    image, built the first time: the CLI wires the product's base images into it, ``cli.task_images``)."""

    client: Any
    image_of: Callable[[PublicTask | Task], str]


@dataclass(frozen=True, slots=True)
class NoImageTaskHost:
    """This worker cannot run image tasks, and why (no docker daemon)."""

    reason: str
