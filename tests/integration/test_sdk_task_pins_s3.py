"""The trainer SDK pins its generations to the task's latest version in a registry on the real local S3
(``RS_TASKS_REGISTRY``), as it does with a registry directory: the pointer read from the bucket, each task's at
most once per ``ttl_s``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from schemas.settings import Settings
from tests.unit.workers.tasks.versions_env import ADD, RIGHT, V1, V2, WRONG

pytestmark = pytest.mark.integration


def test_the_sdk_pins_the_latest_version_in_the_bucket(tmp_path: Path, settings: Settings, s3_bucket: str) -> None:
    from streams.sdk import TrainerClient, TrainerConfig
    from streams.sdk.task_pins import S3LatestVersions
    from workers.tasks.s3_registry import S3TaskRegistry

    url = f"s3://{s3_bucket}/reg"
    local = settings.local.model_copy(update={"cache_dir": tmp_path / "cache"})
    mine = settings.model_copy(update={"tasks_registry": url, "local": local})
    registry = S3TaskRegistry.open(url, mine)
    config = TrainerConfig.from_settings(mine, "run-1", producer_overrides={"log_level": 0})
    pins = config.task_versions
    assert isinstance(pins, S3LatestVersions)
    client = TrainerClient(config, consume=False)
    try:
        unpinned = client.generation("T/1", ADD, generation_id="g1")
        assert client.pinned(unpinned) is unpinned  # no such task yet: published unpinned
        registry.store([WRONG])  # "no such task" was remembered for ttl_s: then the pointer is read again
        deadline = time.monotonic() + 10 * pins.ttl_s
        while client.pinned(unpinned).task_version is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.pinned(unpinned).task_version == V1
        registry.store([RIGHT])
        fresh = S3LatestVersions.open(url, mine.s3, ttl_s=0)
        assert fresh("T/1") == V2  # the pointer a load moved, read at once
        deadline = time.monotonic() + 10 * pins.ttl_s
        while client.pinned(unpinned).task_version != V2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.pinned(unpinned).task_version == V2  # the latest within ttl_s of the load
        own = client.generation("T/1", ADD, generation_id="g2", task_version=V1)
        assert client.pinned(own).task_version == V1  # a trainer's own pin is kept
    finally:
        client.close(flush_timeout_s=0)


def test_a_registry_that_cannot_be_read_leaves_generations_unpinned(settings: Settings, unique_name: str) -> None:
    from streams.sdk.task_pins import S3LatestVersions

    missing = S3LatestVersions.open(f"s3://{unique_name}/reg", settings.s3)  # no such bucket
    assert missing("T/1") is None
    refused = settings.s3.model_copy(update={"access_key": "nobody"})
    assert S3LatestVersions.open(f"s3://{unique_name}/reg", refused)("T/1") is None
