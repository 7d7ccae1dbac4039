"""The artifacts bucket's expiry (issue 28): the rule on a real MinIO (s3proxy, the local S3, has no lifecycle
API), installed once, left alone when right, beside rules that are not ours; on s3proxy, what ``up`` says; and
the content-addressed writers refreshing an old object instead of skipping it, on both servers."""

from __future__ import annotations

import hashlib
import io
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from schemas.content import EXPIRY_RULE_ID, content_key
from schemas.settings import Settings
from streams.sdk.claims import ContentStore
from workers.artifacts import ArtifactStore, remove_bucket
from workers.lifecycle import artifact_lifecycle, ensure_lifecycle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3_600)]


@pytest.fixture
def minio_root(minio: Any) -> Any:
    from minio import Minio

    return Minio(minio.endpoint, access_key=minio.root_user, secret_key=minio.root_password, secure=False)


@pytest.fixture
def minio_bucket(minio_root: Any) -> Iterator[str]:
    bucket = f"rs-lifecycle-{uuid.uuid4().hex[:8]}"
    minio_root.make_bucket(bucket)
    try:
        yield bucket
    finally:
        remove_bucket(minio_root, bucket)


def _rules(client: Any, bucket: str) -> dict[str, tuple[str | None, int | None]]:
    config = client.get_bucket_lifecycle(bucket)
    rules = config.rules if config is not None else []
    return {r.rule_id: (r.rule_filter.prefix, r.expiration.days) for r in rules}


def test_the_expiry_rule_is_installed_once_and_other_rules_are_kept(minio_root: Any, minio_bucket: str) -> None:
    from minio.commonconfig import ENABLED, Filter
    from minio.lifecycleconfig import Expiration, LifecycleConfig, Rule

    theirs = Rule(
        ENABLED, rule_filter=Filter(prefix="scratch/"), rule_id="someone-elses", expiration=Expiration(days=2)
    )
    minio_root.set_bucket_lifecycle(minio_bucket, LifecycleConfig([theirs]))

    first = ensure_lifecycle(minio_root, minio_bucket, 45)
    assert first.state == "installed", first
    assert _rules(minio_root, minio_bucket) == {"someone-elses": ("scratch/", 2), EXPIRY_RULE_ID: ("sha256/", 45)}
    again = ensure_lifecycle(minio_root, minio_bucket, 45)
    assert again.state == "unchanged", "idempotent: nothing written when the rule is right"
    assert _rules(minio_root, minio_bucket) == {"someone-elses": ("scratch/", 2), EXPIRY_RULE_ID: ("sha256/", 45)}

    assert ensure_lifecycle(minio_root, minio_bucket, 10).state == "installed"
    assert _rules(minio_root, minio_bucket)[EXPIRY_RULE_ID] == ("sha256/", 10)
    assert ensure_lifecycle(minio_root, minio_bucket, 0).state == "removed"
    assert _rules(minio_root, minio_bucket) == {"someone-elses": ("scratch/", 2)}, "only our rule goes"
    assert ensure_lifecycle(minio_root, minio_bucket, 0).state == "absent"

    minio_root.delete_bucket_lifecycle(minio_bucket)
    assert ensure_lifecycle(minio_root, minio_bucket, 30).state == "installed"
    assert ensure_lifecycle(minio_root, minio_bucket, 0).state == "removed"
    assert minio_root.get_bucket_lifecycle(minio_bucket) is None, "no rules left: the configuration is deleted"


def test_a_worker_creating_its_bucket_sets_the_rule(minio: Any, minio_root: Any, settings: Settings) -> None:
    """What every role and the episode worker do on start (``artifact_store``), against MinIO."""
    import threading

    from pydantic import SecretStr

    from bus.metrics import WorkerMetrics
    from workers.roles.service import artifact_store

    bucket = f"rs-lifecycle-{uuid.uuid4().hex[:8]}"
    s3 = settings.s3.model_copy(
        update={"endpoint": minio.endpoint, "access_key": minio.root_user, "secret_key": SecretStr(minio.root_password),
                "secure": False, "bucket": bucket, "artifact_expiry_days": 12}
    )  # fmt: skip
    try:
        store = artifact_store(settings.model_copy(update={"s3": s3}), threading.Event(), WorkerMetrics("executor"))
        assert minio_root.bucket_exists(bucket)
        assert _rules(minio_root, bucket) == {EXPIRY_RULE_ID: ("sha256/", 12)}
        assert store.refresh_after_s == 6 * 86_400
    finally:
        if minio_root.bucket_exists(bucket):
            remove_bucket(minio_root, bucket)


def test_what_up_does_on_s3proxy_says_unsupported_and_makes_the_bucket(
    settings: Settings, minio_client: Any, fresh_bucket: str
) -> None:
    from rewardstream.cli.services import report_artifact_lifecycle

    ours = settings.model_copy(update={"s3": settings.s3.model_copy(update={"bucket": fresh_bucket})})
    outcome = artifact_lifecycle(ours)
    assert outcome.state == "unsupported", outcome
    assert "no lifecycle API" in outcome.detail
    assert minio_client.bucket_exists(fresh_bucket)
    console = Console(file=io.StringIO(), width=300)
    report_artifact_lifecycle(ours, console)
    said = console.file.getvalue()  # type: ignore[attr-defined]
    assert said.startswith("s3 lifecycle (unsupported): s3://"), said
    assert "artifacts never expire here" in said


def _age_s(client: Any, bucket: str, key: str) -> float:
    modified: datetime = client.stat_object(bucket, key).last_modified
    return (datetime.now(UTC) - modified).total_seconds()


def _wait_older(client: Any, bucket: str, key: str, seconds: float) -> None:
    """Wait (deadline 20 s) until S3 says the object is at least ``seconds`` old (its clock: 1 s resolution)."""
    deadline = time.monotonic() + 20
    while _age_s(client, bucket, key) < seconds:
        assert time.monotonic() < deadline, f"{key} did not age {seconds}s"
        time.sleep(0.2)


def _refreshes(client: Any, bucket: str, put: Callable[[bytes], None], never: Callable[[bytes], None]) -> None:
    data = f"content {uuid.uuid4()}".encode()
    key = content_key(hashlib.sha256(data).hexdigest())
    put(data)
    first = client.stat_object(bucket, key)
    _wait_older(client, bucket, key, 2.0)
    never(data)
    assert client.stat_object(bucket, key).last_modified == first.last_modified, "no expiry: never refreshed"
    put(data)
    again = client.stat_object(bucket, key)
    assert again.last_modified > first.last_modified, "an old object is refreshed, not just skipped"
    assert again.content_type == first.content_type
    assert again.metadata.get("x-amz-meta-sha256") == hashlib.sha256(data).hexdigest()
    assert client.get_object(bucket, key).read() == data


@pytest.mark.parametrize("server", ["s3proxy", "minio"])
def test_an_old_object_is_refreshed_when_a_writer_skips_its_upload(
    server: str, request: pytest.FixtureRequest, minio_client: Any, s3_bucket: str
) -> None:
    """Both content-addressed writers (the workers' store, the SDK's claim checks): an existing object older
    than ``refresh_after_s`` gets a new age, so an event written now never references an expiring one."""
    if server == "minio":
        client, bucket = request.getfixturevalue("minio_root"), request.getfixturevalue("minio_bucket")
    else:
        client, bucket = minio_client, s3_bucket
    store = ArtifactStore(client, bucket, refresh_after_s=1.0)
    forever = ArtifactStore(client, bucket)

    def store_put(data: bytes) -> None:
        stored = store.put(data, "text/x-python")
        assert stored.key == content_key(stored.sha256)

    def forever_put(data: bytes) -> None:
        forever.put(data, "text/x-python")

    _refreshes(client, bucket, store_put, forever_put)
    claims, never = ContentStore(client, bucket, refresh_after_s=1.0), ContentStore(client, bucket)
    _refreshes(
        client, bucket,
        lambda data: claims.put(hashlib.sha256(data).hexdigest(), data),
        lambda data: never.put(hashlib.sha256(data).hexdigest(), data),
    )  # fmt: skip
