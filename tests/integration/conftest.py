"""Fixtures several integration test modules share, on top of the session fixtures in ``tests/conftest.py``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from schemas.settings import Settings

if TYPE_CHECKING:
    import subprocess

    from infra.monitoring.services import AlertmanagerService, PrometheusService
    from tests.integration.episode_worker_env import EpisodeEnv
    from tests.integration.gateway_env import Stack
    from tests.integration.relay import Relay
    from tests.integration.workers_pipeline_env import HumanEval
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


@pytest.fixture(scope="module")
def minio(tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> Iterator[Any]:
    """A MinIO server of the module's own on a loopback port, for what s3proxy lacks (users, policies, lifecycle
    rules); skipped, or failed under CI, if it cannot be built or started."""
    import secrets
    import subprocess

    from infra.local.minio_server import MinioServer, minio_binary
    from infra.local.paths import PlatformPaths
    from schemas.errors import PlatformError
    from tests.integration.relay import free_port_below_ephemeral

    try:
        binary = minio_binary(PlatformPaths(settings.local.cache_dir))
    except (PlatformError, OSError, subprocess.TimeoutExpired) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must not skip integration tests: {exc}")
        pytest.skip(f"no MinIO server: {exc}")
    server = MinioServer(
        binary, tmp_path_factory.mktemp("minio") / "data", free_port_below_ephemeral(), "rs-root", secrets.token_hex(16)
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


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


@pytest.fixture
def indexer_topics(kafka_config: dict[str, str], unique_name: str) -> Iterator[str]:
    """A topic prefix with the indexer's topics (logs, dlq), deleted afterwards."""
    from tests.integration import prometheus_env

    with prometheus_env.indexer_topics(kafka_config, unique_name) as prefix:
        yield prefix


@pytest.fixture
def scraped_indexer(
    indexer_topics: str, opensearch_client: Any, unique_name: str
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A real role to scrape: ``rewardstream worker indexer`` on ``indexer_topics``; (process, metrics port)."""
    from tests.integration import prometheus_env

    with prometheus_env.indexer_process(indexer_topics, opensearch_client, unique_name) as got:
        yield got


@pytest.fixture
def own_monitoring(tmp_path: Path) -> Iterator[tuple[PrometheusService, AlertmanagerService]]:
    """Our own Prometheus and Alertmanager on free loopback ports, for the test to configure and start."""
    from tests.integration import prometheus_env

    with prometheus_env.own_monitoring(tmp_path) as got:
        yield got


@pytest.fixture(scope="module")
def runs(kafka_config: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One executor and one gateway per ``/run_code`` test module (the expensive part), shared by its tests."""
    from tests.integration.gateway_env import stack

    tmp = tmp_path_factory.mktemp("gateway-runs")
    with stack(kafka_config, f"gwrun-{uuid.uuid4().hex[:8]}", tmp) as made:
        made.spawn("executor", ["worker", "executor", "--concurrency", "2"])
        made.gateway()
        yield made


@pytest.fixture(scope="module")
def url(runs: Stack) -> str:
    """The ``/run_code`` gateway of ``runs``."""
    return runs.gateways[0].url


@pytest.fixture(scope="module")
def humaneval(process_sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> HumanEval:
    """All 164 HumanEval problems converted by the converter and loaded into a temporary registry."""
    from tests.integration.workers_pipeline_env import HumanEval
    from workers.tasks.humaneval import SandboxReference, convert_all, load_problems
    from workers.tasks.registry import TaskRegistry

    problems = load_problems()
    tasks, _ = convert_all(problems, SandboxReference(process_sandbox), workers=2)
    registry_dir = tmp_path_factory.mktemp("registry")
    TaskRegistry(registry_dir).store(tasks)
    return HumanEval(problems, {t.task_id: t for t in tasks}, registry_dir)


@pytest.fixture(scope="module")
def registry_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The episode-worker tests' registry of workspace tasks, one per module."""
    from tests.integration.episode_worker_env import IDLE_TASK_ID, LATE_TASK_ID, SHORT_TASK_ID, TASK_ID, workspace_task
    from workers.tasks.registry import TaskRegistry

    root = tmp_path_factory.mktemp("episode-registry")
    TaskRegistry(root).store([
        workspace_task(TASK_ID, 30), workspace_task(SHORT_TASK_ID, 3),
        workspace_task(IDLE_TASK_ID, 30, idle_timeout_s=3), workspace_task(LATE_TASK_ID, 30, episode_timeout_s=6),
    ])  # fmt: skip
    return root


@pytest.fixture
def episodes(
    prefix: str, kafka_config: dict[str, str], s3_bucket: str, registry_dir: Path, tmp_path: Path
) -> Iterator[EpisodeEnv]:
    """One episode worker's environment: its topics, a reader of what it committed; its processes killed after."""
    from bus.admin import delete_topics
    from schemas.topics import catalog, topic_for
    from tests.integration.episode_worker_env import EpisodeEnv
    from tests.integration.helpers import PARTITIONS
    from tests.integration.workers_pipeline_env import Reader
    from workers.roles.episode_worker import clock_topic, state_changelog

    specs = catalog(prefix, PARTITIONS, 1)
    topics = {r: topic_for(r, specs).name for r in ("actions", "observations", "generations", "dlq", "logs")}
    env = {
        **os.environ, "RS_TOPIC_PREFIX": prefix, "RS_TOPIC_PARTITIONS": str(PARTITIONS),
        "RS_TASKS_DIR": str(registry_dir), "RS_S3_BUCKET": s3_bucket, "RS_METRICS_PORT": "0",
        "RS_WORKER_TRANSACTION_TIMEOUT_MS": "10000", "RS_WORKER_DRAIN_TIMEOUT_S": "20",
        "RS_WORKER_COMMIT_INTERVAL_S": "0.1", "RS_WORKER_INSTANCE_ID": f"episode-{prefix}",
    }  # fmt: skip
    reader = Reader(kafka_config, [topics["observations"], topics["generations"], topics["dlq"], topics["logs"]])
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    box = EpisodeEnv(prefix, kafka_config, env, logs_dir, topics, reader)
    try:
        yield box
    finally:
        for proc in box.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        reader.close()
        settings = Settings(topic_prefix=prefix, topic_partitions=PARTITIONS)
        delete_topics([state_changelog(settings).name, clock_topic(settings).name], kafka_config)
