"""The S3 task registry's logic over an in-memory bucket: versions by content, unchanged tasks cost no write,
every version readable, a worker's cache by version never stale. (Against the real S3:
tests/integration/test_task_registry_s3.py.)"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import encode
from schemas.registry_s3 import RegistryLocation
from schemas.tasks import Task, task_version
from tests.unit.workers.tasks.test_registry import task
from workers.tasks.registry import TaskNotFoundError, TaskVersionNotFoundError
from workers.tasks.s3_access import Listed, S3Access
from workers.tasks.s3_layout import CorruptObjectError
from workers.tasks.s3_registry import S3TaskRegistry
from workers.tasks.version_cache import VersionCache


class MemoryBucket(S3Access):
    """A bucket in a dict, counting requests."""

    def __init__(self) -> None:
        super().__init__(None, "tasks", "memory")
        self.objects: dict[str, bytes] = {}
        self.gets: list[str] = []
        self.puts: list[str] = []

    def get(self, key: str, max_bytes: int) -> bytes | None:
        self.gets.append(key)
        data = self.objects.get(key)
        return None if data is None else data[: max_bytes + 1]

    def put(self, key: str, data: bytes, content_type: str = "application/json") -> None:
        self.puts.append(key)
        self.objects[key] = data

    def list(self, prefix: str) -> Iterator[Listed]:
        for key in sorted(self.objects):
            if key.startswith(prefix):
                yield Listed(key, hashlib.md5(self.objects[key], usedforsecurity=False).hexdigest())


def make(tmp_path: Path, cache: bool = True) -> tuple[S3TaskRegistry, MemoryBucket]:
    bucket = MemoryBucket()
    location = RegistryLocation.parse("s3://tasks/reg")
    versions = VersionCache(tmp_path / "cache", 1_000_000) if cache else None
    return S3TaskRegistry(location, bucket, versions, threads=4), bucket


def tasks(*ids: str, **changes: Any) -> list[Task]:
    return [Task.model_validate(task(task_id, **changes)) for task_id in ids]


def test_a_load_stores_each_version_and_skips_unchanged_tasks(tmp_path: Path) -> None:
    registry, bucket = make(tmp_path)
    first = registry.store(tasks("a/1", "a/2"))
    assert first.added == ("a/1", "a/2")
    assert first.updated == ()
    assert first.unchanged == ()
    assert len(bucket.puts) == 6  # hidden version, public view, pointer: three each
    assert first.versions["a/1"] == task_version(tasks("a/1")[0])
    bucket.puts.clear()
    bucket.gets.clear()
    again = registry.store(tasks("a/1", "a/2"))
    assert again.unchanged == ("a/1", "a/2")
    assert bucket.puts == []
    assert bucket.gets == []
    assert registry.ids() == ["a/1", "a/2"]


def test_a_changed_task_is_a_new_version_and_the_old_one_stays(tmp_path: Path) -> None:
    registry, _bucket = make(tmp_path)
    old = registry.store(tasks("a/1")).versions["a/1"]
    hidden = {"kind": "call", "cases": [{"args": [1, 1], "expected": 2}]}
    report = registry.store(tasks("a/1", hidden_tests=hidden))
    new = report.versions["a/1"]
    assert report.updated == ("a/1",)
    assert report.replaced == {"a/1": old}
    assert new != old
    assert registry.latest_version("a/1") == new
    assert registry.versions("a/1") == [old, new]
    assert registry.task("a/1").hidden_tests.model_dump()["cases"][0]["args"] == [1, 1]
    assert registry.task("a/1", old).hidden_tests.model_dump()["cases"][0]["args"] == [20, 22]
    assert registry.public("a/1", old).task_version == old
    registry.store(tasks("a/1"))  # back to the first content: the same version, kept in its place
    assert registry.versions("a/1") == [old, new]
    assert registry.latest_version("a/1") == old


def test_a_worker_fetches_a_version_once_and_always_reads_the_pointer(tmp_path: Path) -> None:
    registry, bucket = make(tmp_path)
    version = registry.store(tasks("a/1")).versions["a/1"]
    bucket.gets.clear()
    for _ in range(3):
        assert registry.public("a/1").task_version == version
        assert task_version(registry.task("a/1")) == version
    fetched = [key for key in bucket.gets if "/versions/" in key]
    assert len(fetched) == 2  # the public view and the full task, once each
    assert sum(key.endswith("/latest/a%2F1") for key in bucket.gets) == 6  # the pointer, every time
    fresh, _ = make(tmp_path)  # another process on the same host: the disk cache is shared
    fresh.access = bucket
    bucket.gets.clear()
    fresh.task("a/1", version)
    assert bucket.gets == []


def test_a_corrupt_cache_entry_is_fetched_again(tmp_path: Path) -> None:
    registry, _bucket = make(tmp_path)
    version = registry.store(tasks("a/1")).versions["a/1"]
    assert registry.cache is not None
    registry.cache.put(version, b"{}", hidden=True)
    assert task_version(registry.task("a/1", version)) == version
    assert registry.cache.get(version, hidden=True) == encode(registry.task("a/1", version))


def test_a_corrupt_object_is_refused_naming_it(tmp_path: Path) -> None:
    registry, bucket = make(tmp_path, cache=False)
    version = registry.store(tasks("a/1")).versions["a/1"]
    key = registry.location.version_key("a/1", version, hidden=True)
    bucket.objects[key] = b"garbage"
    with pytest.raises(CorruptObjectError, match=f"{key} does not hold version {version}"):
        registry.task("a/1")
    bucket.objects[registry.location.latest_key("a/1")] = b"nope"
    with pytest.raises(CorruptObjectError, match="is not a task version pointer"):
        registry.latest_version("a/1")


def test_unknown_tasks_and_versions(tmp_path: Path) -> None:
    registry, _ = make(tmp_path)
    version = registry.store(tasks("a/1")).versions["a/1"]
    with pytest.raises(TaskNotFoundError, match="no task 'b/1' in the registry at s3://tasks/reg"):
        registry.public("b/1")
    with pytest.raises(TaskVersionNotFoundError, match=f"no version {'c' * 64} of task 'a/1'"):
        registry.task("a/1", "c" * 64)
    with pytest.raises(TaskVersionNotFoundError, match="no task 'b/1'"):
        registry.public("b/1", version)
    with pytest.raises(TaskVersionNotFoundError, match="is not a task version"):
        registry.public("a/1", "../x")
    with pytest.raises(TaskNotFoundError, match="is not a task id"):
        registry.public("..")


def test_an_unreadable_pointer_makes_the_task_updated(tmp_path: Path) -> None:
    registry, bucket = make(tmp_path)
    registry.store(tasks("a/1"))
    bucket.objects[registry.location.latest_key("a/1")] = b"nope"
    report = registry.store(tasks("a/1"))
    assert report.updated == ("a/1",)
    assert report.replaced == {}
    assert registry.latest_version("a/1") == report.versions["a/1"]
