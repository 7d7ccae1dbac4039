"""Pure parts of the artifact store: content keys, URLs, what counts as an outage."""

from __future__ import annotations

import hashlib

import pytest
import urllib3.exceptions
from minio.error import S3Error

from schemas.content import content_key
from workers.artifacts import ArtifactError, is_retriable, parse_url


def _s3_error(code: str) -> S3Error:
    return S3Error(None, code, "msg", "/r", "req", "host")  # type: ignore[arg-type]


def test_key_is_the_content_digest() -> None:
    digest = hashlib.sha256(b"print(1)").hexdigest()
    assert content_key(digest) == f"sha256/{digest[:2]}/{digest}"


def test_parse_url_round_trip_and_rejects_other_schemes() -> None:
    assert parse_url("s3://bucket/sha256/ab/abc") == ("bucket", "sha256/ab/abc")
    with pytest.raises(ArtifactError):
        parse_url("https://bucket/key")
    with pytest.raises(ArtifactError):
        parse_url("s3://bucket-only")


def test_outages_are_retried_refusals_are_not() -> None:
    assert is_retriable(urllib3.exceptions.MaxRetryError(None, "/", reason=ConnectionRefusedError()))  # type: ignore[arg-type]
    assert is_retriable(ConnectionResetError())
    assert is_retriable(_s3_error("ServiceUnavailable"))
    assert is_retriable(_s3_error("SlowDown"))
    assert not is_retriable(_s3_error("AccessDenied"))
    assert not is_retriable(_s3_error("NoSuchBucket"))
    assert not is_retriable(ValueError("bug"))
