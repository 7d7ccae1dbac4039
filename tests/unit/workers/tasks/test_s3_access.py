"""The S3 registry's requests: every failure one line naming what to fix; an outage retried, then reported."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from minio.error import S3Error

from workers.tasks.s3_access import RegistryAccessDeniedError, RegistryAccessError, S3Access


def s3_error(code: str) -> S3Error:
    response = urllib3.HTTPResponse(status=403)
    return S3Error(response, code, f"{code} message", "/tasks/k", "req", "host")


class Refusing:
    """A client whose every call raises ``error`` (``times`` times, then answers)."""

    def __init__(self, error: Exception, times: int = 1_000) -> None:
        self.error = error
        self.times = times
        self.calls = 0

    def _maybe(self) -> None:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error

    def get_object(self, bucket: str, key: str) -> Any:
        self._maybe()

        class Response:
            def read(self, amount: int) -> bytes:
                return b"0123456789"[:amount]

            def close(self) -> None: ...

            def release_conn(self) -> None: ...

        return Response()

    def put_object(self, *args: Any) -> None:
        self._maybe()

    def list_objects(self, bucket: str, **kwargs: Any) -> Iterator[Any]:
        self._maybe()
        return iter([])


def access(client: Any, retry_s: float = 0.0) -> S3Access:
    return S3Access(client, "tasks", "127.0.0.1:9000", retry_s=retry_s)


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("NoSuchBucket", "no bucket 'tasks' at S3 127.0.0.1:9000 (task registry): create it, or fix the registry URL"),
        (
            "InvalidAccessKeyId",
            "S3 at 127.0.0.1:9000 rejected the credentials (InvalidAccessKeyId): check "
            "RS_S3_ACCESS_KEY/RS_S3_SECRET_KEY",
        ),
        (
            "SignatureDoesNotMatch",
            "S3 at 127.0.0.1:9000 rejected the credentials (SignatureDoesNotMatch): check "
            "RS_S3_ACCESS_KEY/RS_S3_SECRET_KEY",
        ),
        ("AccessDenied", "access denied: these S3 credentials may not read s3://tasks/reg/hidden/x"),
        (
            "InvalidObjectState",
            "S3 refused to read s3://tasks/reg/hidden/x: InvalidObjectState: InvalidObjectState message",
        ),
    ],
)
def test_refusals_are_one_line(code: str, message: str) -> None:
    with pytest.raises(RegistryAccessError) as caught:
        access(Refusing(s3_error(code))).get("reg/hidden/x", 100)
    assert str(caught.value) == message
    assert isinstance(caught.value, RegistryAccessDeniedError) == (code == "AccessDenied")


def test_a_missing_object_is_none_and_a_long_one_is_cut() -> None:
    assert access(Refusing(s3_error("NoSuchKey"))).get("k", 100) is None
    assert access(Refusing(s3_error("NoSuchKey"), times=0)).get("k", 3) == b"0123"


def test_an_outage_is_retried_then_reported() -> None:
    flaky = Refusing(urllib3.exceptions.NewConnectionError(None, "refused"), times=2)  # type: ignore[arg-type]
    assert access(flaky, retry_s=5.0).get("k", 100) == b"0123456789"
    assert flaky.calls == 3
    down = Refusing(urllib3.exceptions.NewConnectionError(None, "refused"))  # type: ignore[arg-type]
    with pytest.raises(RegistryAccessError, match=r"^S3 does not answer at 127.0.0.1:9000 \(tried 0.3 s to write"):
        access(down, retry_s=0.3).put("k", b"x")
    assert down.calls > 1


def test_a_listing_that_fails_is_an_error_not_an_empty_list() -> None:
    with pytest.raises(RegistryAccessError, match="does not answer"):
        list(access(Refusing(urllib3.exceptions.NewConnectionError(None, "refused"))).list("p/"))  # type: ignore[arg-type]
    assert list(access(Refusing(s3_error("x"), times=0)).list("p/")) == []
