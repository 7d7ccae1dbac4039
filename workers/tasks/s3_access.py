"""The S3 requests of the task registry, each failure turned into one line that names what to fix.

Why its own module: the registry's logic (what to read, what to skip) stays free of the ``minio`` SDK's error
codes, and every command and worker gets the same plain sentences: no bucket, credentials refused, access
denied to a prefix (the hidden one, for a worker's credentials), an object that cannot be read. An outage
(nothing answers, a 5xx) is retried with backoff for ``retry_s`` before it is reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from schemas.caps import QUOTE_CHARS
from schemas.errors import RewardstreamError
from schemas.settings import Settings
from workers.artifacts import is_retriable, minio_client

T = TypeVar("T")

_CREDENTIALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"})
_MISSING = frozenset({"NoSuchKey", "NoSuchObject"})


class RegistryAccessError(RewardstreamError):
    """S3 refused or failed a request of the task registry (no bucket, bad credentials, an outage)."""


class RegistryAccessDeniedError(RegistryAccessError):
    """These credentials may not read or write that part of the registry (e.g. a worker's, the hidden part)."""


@dataclass(frozen=True, slots=True)
class Listed:
    """An object a listing named: its key and ETag (the MD5 of a simple upload's bytes)."""

    key: str
    etag: str


def registry_client(settings: Settings, connections: int = 16, timeout_s: float = 10.0) -> Any:
    """A Minio client with ``connections`` pooled connections (one per uploading thread), failing fast: the
    registry does its own retrying."""
    return minio_client(settings, timeout_s, connections)


class S3Access:
    """Get, put and list the objects of one bucket; thread-safe (the client is)."""

    def __init__(self, client: Any, bucket: str, endpoint: str, *, retry_s: float = 10.0) -> None:
        self.client = client
        self.bucket = bucket
        self.endpoint = endpoint
        self.retry_s = retry_s

    def get(self, key: str, max_bytes: int) -> bytes | None:
        """The object's bytes (at most ``max_bytes + 1`` read: a longer one is the caller's to refuse), None if
        there is no such object."""

        def read() -> bytes | None:
            from minio.error import S3Error

            try:
                response = self.client.get_object(self.bucket, key)
            except S3Error as exc:
                if exc.code in _MISSING:
                    return None
                raise
            try:
                return bytes(response.read(max_bytes + 1))
            finally:
                response.close()
                response.release_conn()

        return self._call("read", key, read)

    def put(self, key: str, data: bytes, content_type: str = "application/json") -> None:
        import io

        self._call(
            "write", key, lambda: self.client.put_object(self.bucket, key, io.BytesIO(data), len(data), content_type)
        )

    def list(self, prefix: str) -> Iterator[Listed]:
        """Every object under ``prefix`` (v1 listings: the local S3 refuses a v2 continuation over nested keys). An
        outage mid-listing resumes after the last key listed."""
        last: str | None = None
        deadline = time.monotonic() + self.retry_s
        pause = 0.1
        while True:
            try:
                for item in self.client.list_objects(
                    self.bucket, prefix=prefix, recursive=True, start_after=last, use_api_v1=True
                ):
                    last = item.object_name
                    yield Listed(item.object_name, (item.etag or "").strip('"'))
                return
            except Exception as exc:
                if not is_retriable(exc) or time.monotonic() + pause > deadline:
                    raise self._error("list", prefix, exc) from None
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

    # ---- errors --------------------------------------------------------------------------------------------
    def _call(self, what: str, key: str, action: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.retry_s
        pause = 0.1
        while True:
            try:
                return action()
            except Exception as exc:
                if not is_retriable(exc) or time.monotonic() + pause > deadline:
                    raise self._error(what, key, exc) from None
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

    def _no_bucket(self) -> RegistryAccessError:
        return RegistryAccessError(
            f"no bucket {self.bucket!r} at S3 {self.endpoint} (task registry): create it, or fix the registry URL"
        )

    def _error(self, what: str, key: str, exc: Exception) -> RegistryAccessError:
        from minio.error import S3Error

        where = f"s3://{self.bucket}/{key}"[:QUOTE_CHARS]
        if isinstance(exc, S3Error):
            if exc.code == "NoSuchBucket":
                return self._no_bucket()
            if exc.code in _CREDENTIALS:
                return RegistryAccessError(
                    f"S3 at {self.endpoint} rejected the credentials ({exc.code}): check "
                    "RS_S3_ACCESS_KEY/RS_S3_SECRET_KEY"
                )
            if exc.code == "AccessDenied":
                return RegistryAccessDeniedError(f"access denied: these S3 credentials may not {what} {where}")
            return RegistryAccessError(f"S3 refused to {what} {where}: {exc.code}: {_line(exc.message or '')}")
        if is_retriable(exc):
            return RegistryAccessError(
                f"S3 does not answer at {self.endpoint} (tried {self.retry_s:g} s to {what} {where}): {_line(str(exc))}"
            )
        return RegistryAccessError(f"cannot {what} {where}: {type(exc).__name__}: {_line(str(exc))}")


def _line(text: str) -> str:
    return (text.splitlines()[0] if text else "")[:QUOTE_CHARS]
