"""The task registry in the real local S3, as users run it: ``rewardstream tasks load --registry s3://...``, its
versions as content digests, workers reading the latest at once (never stale), and bad input in one line."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.settings import Settings
from tests.unit.workers.tasks.test_registry import task

pytestmark = pytest.mark.integration

CLI = str(Path(sys.executable).with_name("rewardstream"))


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, timeout=300, check=False, env={**os.environ, **(env or {})}
    )


def write(path: Path, *docs: dict[str, Any]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(doc) + b"\n" for doc in docs))
    return path


HIDDEN_V2 = {"kind": "call", "cases": [{"args": [40, 2], "expected": 42}]}


def test_load_show_versions_and_list(tmp_path: Path, s3_bucket: str, minio_client: Any) -> None:
    url = f"s3://{s3_bucket}/reg"
    first = write(tmp_path / "v1.jsonl", *(task(f"demo/{i}") for i in range(50)))
    loaded = run("tasks", "load", str(first), "--registry", url, "--json")
    assert loaded.returncode == 0, loaded.stderr
    report = json.loads(loaded.stdout)
    assert len(report["added"]) == 50
    assert report["registry"] == url
    old = report["versions"]["demo/7"]

    again = json.loads(run("tasks", "load", str(first), "--registry", url, "--json").stdout)
    assert len(again["unchanged"]) == 50
    assert again["added"] == []
    assert again["updated"] == []

    fixed = write(tmp_path / "v2.jsonl", task("demo/7", hidden_tests=HIDDEN_V2))
    updated = run("tasks", "load", str(fixed), "--registry", url)
    assert updated.returncode == 0, updated.stderr
    assert "updated demo/7: version " in updated.stdout
    assert f"(was {old})" in updated.stdout

    shown = json.loads(run("tasks", "show", "demo/7", "--registry", url).stdout)
    assert shown["task_version"] != old
    assert "hidden_tests" not in shown
    assert json.loads(run("tasks", "show", "demo/7", "--registry", url, "--version", old).stdout)["task_version"] == old
    versions = json.loads(run("tasks", "versions", "demo/7", "--registry", url, "--json").stdout)
    assert versions["versions"] == [old, shown["task_version"]]
    assert versions["latest"] == shown["task_version"]
    listed = run("tasks", "list", "--registry", url, "--json")
    assert sorted(json.loads(listed.stdout)["tasks"]) == sorted(f"demo/{i}" for i in range(50))
    # The same from the setting workers use.
    assert json.loads(run("tasks", "list", "--json", env={"RS_TASKS_REGISTRY": url}).stdout)["tasks"]

    names = {obj.object_name for obj in minio_client.list_objects(s3_bucket, prefix="reg/", recursive=True)}
    assert f"reg/hidden/versions/demo%2F7/{old}.json" in names
    assert all(name.startswith(("reg/public/", "reg/hidden/")) for name in names)
    assert not any("hidden_tests" in minio_client.get_object(s3_bucket, name).read().decode()
                   for name in names if name.startswith("reg/public/versions/"))  # fmt: skip


def test_a_worker_grades_the_new_version_at_once(tmp_path: Path, settings: Settings, s3_bucket: str) -> None:
    """A role's TaskSource over the S3 registry (RS_TASKS_REGISTRY): a corrected task is read by the next
    generation, the old version stays readable, and the local cache holds versions only."""
    from workers.roles.common import TaskSource
    from workers.tasks.reader import registry_from_settings
    from workers.tasks.s3_registry import S3TaskRegistry

    url = f"s3://{s3_bucket}/reg"
    local = settings.local.model_copy(update={"cache_dir": tmp_path / "cache"})
    mine = settings.model_copy(update={"tasks_registry": url, "local": local})
    registry = registry_from_settings(mine)
    assert isinstance(registry, S3TaskRegistry)
    source = TaskSource(registry)
    assert run("tasks", "load", str(write(tmp_path / "a.jsonl", task("demo/1"))), "--registry", url).returncode == 0
    first = source.task("demo/1")
    assert first.task.hidden_tests.model_dump()["cases"][0]["args"] == [20, 22]
    fixed = write(tmp_path / "b.jsonl", task("demo/1", hidden_tests=HIDDEN_V2))
    assert run("tasks", "load", str(fixed), "--registry", url).returncode == 0
    second = source.task("demo/1")
    assert second.version != first.version
    assert second.task.hidden_tests.model_dump()["cases"][0]["args"] == [40, 2]
    assert source.task("demo/1", first.version).task == first.task
    cached = sorted(p.name for p in (tmp_path / "cache" / "task-cache" / "hidden").glob("*/*.json"))
    assert cached == sorted([f"{first.version}.json", f"{second.version}.json"])


def test_bad_input_is_one_line(tmp_path: Path, s3_bucket: str, minio_client: Any) -> None:
    url = f"s3://{s3_bucket}/reg"
    tasks = write(tmp_path / "a.jsonl", task("demo/1"))
    assert run("tasks", "load", str(tasks), "--registry", url).returncode == 0

    def error(*args: str, env: dict[str, str] | None = None) -> str:
        done = run(*args, env=env)
        assert done.returncode == 2, done.stdout
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        return lines[0]

    assert error("tasks", "load", str(tasks), "--registry", f"s3://{s3_bucket}-none/reg") == (
        f"rewardstream: error: no bucket '{s3_bucket}-none' at S3 127.0.0.1:9000 (task registry): create it, or "
        "fix the registry URL"
    )
    assert "rejected the credentials" in error(
        "tasks", "show", "demo/1", "--registry", url, env={"RS_S3_SECRET_KEY": "not-the-secret"}
    )
    assert "is not an s3://bucket/prefix URL" in error("tasks", "list", "--registry", "/srv/tasks")
    version = json.loads(run("tasks", "show", "demo/1", "--registry", url).stdout)["task_version"]
    key = f"reg/public/versions/demo%2F1/{version}.json"
    minio_client.put_object(s3_bucket, key, io.BytesIO(b"{not json"), 9)
    assert error("tasks", "show", "demo/1", "--registry", url, env={"RS_CACHE_DIR": str(tmp_path / "c")}).startswith(
        f"rewardstream: error: {key} is not a public task view: invalid PublicTask"
    )
    minio_client.put_object(s3_bucket, "reg/public/latest/demo%2F1", io.BytesIO(b"nope"), 4)
    assert error("tasks", "show", "demo/1", "--registry", url) == (
        "rewardstream: error: reg/public/latest/demo%2F1 is not a task version pointer (4 bytes, not 64 hex digits)"
    )
    assert error("tasks", "list", "--registry", url, "--dir", str(tmp_path)) == (
        "rewardstream: error: --dir and --registry name two registries: give one"
    )
