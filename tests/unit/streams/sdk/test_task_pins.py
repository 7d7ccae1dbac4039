"""The S3 pins' cache: each task's pointer read at most once per ``ttl_s``, what cannot be told is None, and an
outage is said once (the real bucket: tests/integration/test_sdk_task_pins_s3.py)."""

from __future__ import annotations

import logging

import pytest

from schemas.registry_s3 import RegistryLocation
from schemas.settings import Settings
from streams.sdk.config import TrainerConfig, latest_versions
from streams.sdk.task_pins import S3LatestVersions

V1, V2 = "a" * 64, "b" * 64
LOCATION = RegistryLocation.parse("s3://tasks/reg")


class Bucket:
    """The pointers by key; counts the reads; fails while ``down``."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.reads: list[str] = []
        self.down = False

    def __call__(self, key: str) -> bytes | None:
        self.reads.append(key)
        if self.down:
            raise ConnectionError("connection refused\nmore")
        return self.objects.get(key)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_pointer_is_read_once_per_ttl() -> None:
    bucket, clock = Bucket(), Clock()
    pins = S3LatestVersions(LOCATION, bucket, ttl_s=1.0, clock=clock)
    bucket.objects[LOCATION.latest_key("HumanEval/0")] = V1.encode() + b"\n"
    assert pins("HumanEval/0") == V1
    assert bucket.reads == ["reg/public/latest/HumanEval%2F0"]
    bucket.objects[LOCATION.latest_key("HumanEval/0")] = V2.encode() + b"\n"  # a load moved it
    clock.now += 0.5
    assert pins("HumanEval/0") == V1  # within the ttl: the version before the load
    clock.now += 0.5
    assert pins("HumanEval/0") == V2
    assert len(bucket.reads) == 2


def test_ttl_zero_reads_at_each_call() -> None:
    bucket = Bucket()
    pins = S3LatestVersions(LOCATION, bucket, ttl_s=0.0, clock=Clock())
    assert [pins("T/1") for _ in range(3)] == [None] * 3
    assert len(bucket.reads) == 3


def test_what_cannot_be_told_is_none() -> None:
    bucket, clock = Bucket(), Clock()
    pins = S3LatestVersions(LOCATION, bucket, clock=clock)
    assert pins("missing") is None
    bucket.objects[LOCATION.latest_key("junk")] = b"not a version"
    assert pins("junk") is None
    assert pins("..") is None  # no task can have that name: not even read
    assert ".." not in " ".join(bucket.reads)


def test_an_outage_is_said_once_and_costs_a_read_per_task_per_ttl(caplog: pytest.LogCaptureFixture) -> None:
    bucket, clock = Bucket(), Clock()
    pins = S3LatestVersions(LOCATION, bucket, clock=clock)
    bucket.down = True
    with caplog.at_level(logging.INFO, logger="rewardstream.sdk"):
        assert [pins("T/1") for _ in range(5)] + [pins("T/2")] == [None] * 6
        assert len(bucket.reads) == 2
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == ["cannot read s3://tasks/reg/public/latest/T%2F1 (generations go unpinned until it can): "
                            "connection refused"]  # fmt: skip
        bucket.down = False
        bucket.objects[LOCATION.latest_key("T/1")] = V1.encode()
        clock.now += 1.0
        assert pins("T/1") == V1
        assert any("again" in r.getMessage() for r in caplog.records)


def test_the_sdk_pins_from_the_registry_the_workers_read() -> None:
    s3 = Settings(tasks_registry="s3://tasks/reg", kafka_bootstrap="127.0.0.1:1")
    pins = latest_versions(s3)
    assert isinstance(pins, S3LatestVersions)
    assert pins.location == LOCATION
    config = TrainerConfig.from_settings(s3, "run-1")
    assert isinstance(config.task_versions, S3LatestVersions)
    assert TrainerConfig.from_settings(s3, "run-1", task_versions=None).task_versions is None
