"""Fixtures several integration test modules share, on top of the session fixtures in ``tests/conftest.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from schemas.settings import Settings

if TYPE_CHECKING:
    from tests.integration.relay import Relay
    from workers.sandbox.api import Sandbox

# Imports of the code under test are inside the fixtures: collecting a module that needs none of them
# does not import them.


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test on an episode pipeline (``episode_env.Stack``) reports where its rewards stopped: the
    worker's and the processors' logs, taken while they still run (before the fixtures' teardown)."""
    report = yield
    if report.failed and report.when in ("setup", "call"):
        from tests.integration.episode_env import Stack

        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, Stack):
                report.sections.append(("episode pipeline diagnostics", value.diagnostics()))
    return report


@pytest.fixture(scope="module")
def process_sandbox() -> Iterator[Sandbox]:
    """One process sandbox a module (skipped, or failed under CI, when it cannot start)."""
    from tests.integration.sdk_env import process_sandbox_or_skip

    sandbox = process_sandbox_or_skip()
    try:
        yield sandbox
    finally:
        sandbox.close()


@pytest.fixture
def prefix(kafka_config: dict[str, str], unique_name: str) -> Iterator[str]:
    """A topic prefix of its own with the whole catalog created (``helpers.PARTITIONS`` partitions each),
    deleted afterwards."""
    from bus.admin import delete_topics, ensure_topics
    from schemas.topics import catalog
    from tests.integration.helpers import PARTITIONS

    name = f"rs-test.{unique_name}."
    specs = catalog(name, PARTITIONS, 1)
    ensure_topics(specs, kafka_config)
    try:
        yield name
    finally:
        delete_topics([s.name for s in specs], kafka_config)


@pytest.fixture
def fresh_bucket(minio_client: Any, unique_name: str) -> Iterator[str]:
    """A bucket name nobody created (the code under test must create it); emptied and removed afterwards."""
    try:
        yield unique_name
    finally:
        if minio_client.bucket_exists(unique_name):
            from workers.artifacts import remove_bucket

            remove_bucket(minio_client, unique_name)


@pytest.fixture
def relay(settings: Settings, minio_client: Any) -> Iterator[Relay]:
    """A relay in front of the shared S3, closed (S3 through it refuses connections) until the test opens it."""
    from tests.integration.relay import Relay, free_port_below_ephemeral

    host, port = settings.s3.endpoint.rsplit(":", 1)
    relay = Relay(free_port_below_ephemeral(), (host, int(port)))
    try:
        yield relay
    finally:
        relay.close()


@pytest.fixture
def logs_index_prefix(opensearch_client: Any, unique_name: str) -> Iterator[str]:
    """An OpenSearch index prefix of its own for log lines; its daily indices and template are deleted after."""
    index_prefix = f"{unique_name}-logs"
    try:
        yield index_prefix
    finally:
        for name in opensearch_client.indices.get(index=f"{index_prefix}-*", ignore_unavailable=True):
            opensearch_client.indices.delete(index=name, ignore_unavailable=True)
        opensearch_client.indices.delete_index_template(name=f"{index_prefix}-template", ignore=[404])
