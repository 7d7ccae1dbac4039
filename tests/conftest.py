"""Session fixtures over the real local services, with unique topic/index/bucket names per test.

A service that is not running makes its tests skip with what to start, except under CI (``CI=true``),
where a missing service fails the run: CI must never skip an integration test.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from infra.local.platform import Platform
from infra.local.service import Health
from schemas.settings import Settings
from workers.artifacts import remove_bucket

# Property tests: bounded in CI (``ci``, the default); ``HYPOTHESIS_PROFILE=fuzz`` for a long local run.
hypothesis_settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True)
hypothesis_settings.register_profile("fuzz", max_examples=5_000, deadline=None, print_blob=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def platform_health(settings: Settings) -> dict[str, Health]:
    return Platform.from_settings(settings).status()


def _require(platform_health: dict[str, Health], service: str) -> Health:
    health = platform_health[service]
    if not health.healthy:
        message = f"{service} is not available ({health.reason}); start it with `rewardstream up`"
        if os.environ.get("CI"):
            pytest.fail(f"CI must not skip integration tests: {message}")
        pytest.skip(message)
    return health


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A name no other test (or earlier run) uses: lowercase, safe for topics, indices and buckets."""
    test = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:30]
    return f"t-{test}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def kafka_config(settings: Settings, platform_health: dict[str, Health]) -> dict[str, str]:
    _require(platform_health, "kafka")
    return settings.kafka_client_config()


@pytest.fixture
def kafka_topic(kafka_config: dict[str, str], unique_name: str) -> Iterator[str]:
    """A fresh 3-partition topic, deleted after the test."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**kafka_config})
    topic = f"rs-test.{unique_name}"
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(timeout=30)
    try:
        yield topic
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)


@pytest.fixture(scope="session")
def opensearch_client(settings: Settings, platform_health: dict[str, Health]) -> Iterator[Any]:
    from opensearchpy import OpenSearch

    _require(platform_health, "opensearch")
    client = OpenSearch(hosts=[settings.opensearch.url], timeout=30)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def opensearch_index(opensearch_client: Any, unique_name: str) -> Iterator[str]:
    """A unique index name; the index (if created) is deleted after the test."""
    try:
        yield unique_name
    finally:
        opensearch_client.indices.delete(index=unique_name, ignore_unavailable=True)


@pytest.fixture(scope="session")
def minio_client(settings: Settings, platform_health: dict[str, Health]) -> Any:
    from minio import Minio

    _require(platform_health, "s3")
    return Minio(
        settings.s3.endpoint,
        access_key=settings.s3.access_key,
        secret_key=settings.s3.secret_key.get_secret_value(),
        secure=settings.s3.secure,
        region=settings.s3.region,
    )


@pytest.fixture
def s3_bucket(minio_client: Any, unique_name: str) -> Iterator[str]:
    """A fresh bucket, emptied and removed after the test."""
    minio_client.make_bucket(unique_name)
    try:
        yield unique_name
    finally:
        remove_bucket(minio_client, unique_name)


@pytest.fixture(scope="session")
def docker_client(settings: Settings, platform_health: dict[str, Health]) -> Iterator[Any]:
    import docker

    _require(platform_health, "docker")
    client = docker.DockerClient(base_url=settings.sandbox.docker_host or "unix:///var/run/docker.sock")
    try:
        yield client
    finally:
        client.close()
