"""A role's task reads: an S3 registry that fails is the infrastructure's (retried for as long as the worker
runs, never dead-lettered); an unknown task is the event's."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.registry_s3 import RegistryLocation
from schemas.tasks import Task
from tests.unit.workers.tasks.test_registry import task
from tests.unit.workers.tasks.test_s3_registry import MemoryBucket
from workers.handler import InfrastructureError
from workers.roles.common import TaskRegistryUnavailableError, TaskSource, UnknownTaskError
from workers.tasks.s3_access import RegistryAccessDeniedError
from workers.tasks.s3_registry import S3TaskRegistry


class DenyingBucket(MemoryBucket):
    def get(self, key: str, max_bytes: int) -> bytes | None:
        if "/hidden/" in key:
            raise RegistryAccessDeniedError(f"access denied: these S3 credentials may not read s3://tasks/{key}")
        return super().get(key, max_bytes)


def test_an_s3_registry_that_fails_is_the_infrastructures(tmp_path: Path) -> None:
    registry = S3TaskRegistry(RegistryLocation.parse("s3://tasks/reg"), DenyingBucket(), None)
    version = registry.store([Task.model_validate(task("demo/1"))]).versions["demo/1"]
    source = TaskSource(registry)
    assert source.public("demo/1").version == version
    with pytest.raises(TaskRegistryUnavailableError, match="access denied") as caught:
        source.task("demo/1")
    assert isinstance(caught.value, InfrastructureError)
    with pytest.raises(UnknownTaskError, match="no task 'demo/2'"):
        source.public("demo/2")
