"""Which task registry a process reads: the directory (``RS_TASKS_DIR``) or the S3 bucket
(``RS_TASKS_REGISTRY=s3://bucket/prefix``), behind the one interface the roles use.

Why a protocol: the roles' ``TaskSource`` caches by version and reads the latest pointer each time whatever the
registry is; only where the bytes live differs.
"""

from __future__ import annotations

from typing import Protocol

from schemas.settings import Settings
from schemas.tasks import PublicTask, Task
from workers.tasks.registry import TaskRegistry
from workers.tasks.s3_registry import S3TaskRegistry


class TaskReader(Protocol):
    """What a role reads of a registry (``TaskRegistry``, ``S3TaskRegistry``)."""

    def ids(self) -> list[str]: ...

    def latest_version(self, task_id: str) -> str | None: ...

    def versions(self, task_id: str) -> list[str]: ...

    def public(self, task_id: str, version: str | None = None) -> PublicTask: ...

    def task(self, task_id: str, version: str | None = None) -> Task: ...


def registry_from_settings(settings: Settings) -> TaskRegistry | S3TaskRegistry:
    """The registry ``settings`` name: ``tasks_registry`` (S3) when set, else the directory ``tasks_dir``."""
    if settings.tasks_registry:
        return S3TaskRegistry.open(settings.tasks_registry, settings)
    return TaskRegistry.from_settings(settings)
