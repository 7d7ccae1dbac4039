"""Which registry a process reads: RS_TASKS_REGISTRY (S3) when set, else the directory RS_TASKS_DIR."""

from __future__ import annotations

from pathlib import Path

from schemas.settings import Settings
from workers.tasks.reader import registry_from_settings
from workers.tasks.registry import TaskRegistry
from workers.tasks.s3_registry import S3TaskRegistry


def test_the_directory_unless_an_s3_registry_is_set(tmp_path: Path) -> None:
    directory = registry_from_settings(Settings(tasks_dir=tmp_path / "tasks"))
    assert isinstance(directory, TaskRegistry)
    assert directory.root == tmp_path / "tasks"
    s3 = registry_from_settings(Settings(tasks_dir=tmp_path, tasks_registry="s3://tasks/reg", tasks_cache_mb=3))
    assert isinstance(s3, S3TaskRegistry)
    assert s3.root == "s3://tasks/reg"
    assert s3.cache is not None
    assert s3.cache.max_bytes == 3 * 1024 * 1024
