"""The content-addressed artifact store against the real S3 (s3proxy locally), through the minio SDK.

The outage is made with a small TCP relay in front of the shared S3 that the test closes and reopens:
the shared service itself is never stopped.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import pytest
from pydantic import SecretStr

from schemas.events import GenerationEvent
from schemas.settings import Settings
from tests.integration.relay import Relay
from workers.artifacts import ArtifactError, ArtifactStore, RetryPolicy
from workers.artifacts import minio_client as make_minio

pytestmark = pytest.mark.integration


def _store(settings: Settings, endpoint: str, bucket: str, **kw: Any) -> ArtifactStore:
    client = make_minio(settings.model_copy(update={"s3_endpoint": endpoint}), timeout_s=3)
    return ArtifactStore(client, bucket, **kw)


def test_put_is_content_addressed_deduplicated_and_verified(
    settings: Settings, minio_client: Any, fresh_bucket: str
) -> None:
    store = ArtifactStore(make_minio(settings), fresh_bucket)
    store.start()
    store.start()  # idempotent
    assert minio_client.bucket_exists(fresh_bucket)
    code = "def add(a, b):\n    return a + b\n" * 5000  # bigger than one would inline
    first = store.put_text(code)
    digest = hashlib.sha256(code.encode()).hexdigest()
    assert first.uploaded
    assert first.sha256 == digest
    assert first.url == f"s3://{fresh_bucket}/sha256/{digest[:2]}/{digest}"
    second = store.put_text(code)
    assert not second.uploaded
    assert second.url == first.url
    assert store.get(first.url).decode() == code
    # The URL is what events carry (claim check).
    event = GenerationEvent(
        generation_id="g", episode_id="g", run_id="r", task_id="HumanEval/0", policy_version="step-1",
        code_ref=first.url, code_sha256=first.sha256,
    )  # fmt: skip
    assert event.code_ref == first.url

    # A bounded read (a claim check's declared size): the object whole, or refused without reading it all.
    assert store.get(first.url, max_bytes=len(code)) == code.encode()
    with pytest.raises(ArtifactError, match=f"is larger than {len(code) - 1} bytes") as larger:
        store.get(first.url, max_bytes=len(code) - 1)
    assert not larger.value.outage
    assert store.get(first.url, max_bytes=len(code) + 10) == code.encode()  # the connection is fine after it

    # Per-case results as canonical JSON: the same results in another key order share one object.
    results = store.put_json({"cases": [{"id": "c1", "status": "passed"}], "total": 1})
    same = store.put_json({"total": 1, "cases": [{"status": "passed", "id": "c1"}]})
    assert same.url == results.url
    assert not same.uploaded

    # Someone overwrote the object: reading it back says so instead of returning wrong bytes.
    import io

    minio_client.put_object(fresh_bucket, first.key, io.BytesIO(b"tampered"), 8)
    with pytest.raises(ArtifactError, match="does not match its sha256"):
        store.get(first.url)


def test_s3_outage_is_retried_until_s3_is_back(settings: Settings, relay: Relay, fresh_bucket: str) -> None:
    relay.open()
    retries: list[BaseException] = []
    store = _store(
        settings, f"127.0.0.1:{relay.port}", fresh_bucket,
        retry=RetryPolicy(initial_s=0.1, max_s=0.5, max_elapsed_s=60), on_retry=retries.append,
    )  # fmt: skip
    store.start()
    relay.close()
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(store.put(b"stdout that must not be lost")))
    worker.start()
    deadline = time.monotonic() + 30
    while len(retries) < 3:
        assert time.monotonic() < deadline, "no retries while S3 was unreachable"
        time.sleep(0.05)
    assert not result
    relay.open()
    worker.join(timeout=30)
    assert result, "the put did not complete once S3 was back"
    assert result[0].uploaded
    assert store.get(result[0].url) == b"stdout that must not be lost"


def test_outage_longer_than_the_budget_and_refusals_raise(settings: Settings, relay: Relay, fresh_bucket: str) -> None:
    relay.open()
    store = _store(settings, f"127.0.0.1:{relay.port}", fresh_bucket, retry=RetryPolicy(0.1, 0.2, max_elapsed_s=1.0))
    store.start()
    relay.close()
    started = time.monotonic()
    with pytest.raises(ArtifactError, match="still failing after"):
        store.put(b"x")
    assert time.monotonic() - started < 10
    relay.open()

    wrong = settings.model_copy(update={"s3_secret_key": SecretStr("definitely-wrong")})
    bad = ArtifactStore(make_minio(wrong), fresh_bucket, retry=RetryPolicy(0.1, 0.2, max_elapsed_s=30))
    started = time.monotonic()
    with pytest.raises(ArtifactError) as info:
        bad.put(b"x")
    assert time.monotonic() - started < 5, "a credential refusal must not be retried"
    assert "definitely-wrong" not in str(info.value)
