"""Content-addressed artifact store on S3 (MinIO in production, s3proxy locally) through the ``minio`` SDK.

Why content addressing (key = sha256 of the bytes): the same code or output uploaded twice (a retried run,
a re-delivered event) lands on the same object, so retries never duplicate, an upload can be skipped when
the object exists, and a reader can verify what it got against the key. Events carry ``s3://bucket/key``.
S3 outages are retried with capped exponential backoff until ``max_elapsed_s`` (workers use no limit: they
retry until they are stopped); after that the caller gets ``ArtifactError`` with ``outage=True`` and must not
commit its input (so the work is redone later, never lost). Keys known to exist (uploaded or seen by this
store) are remembered, so content that recurs (the same code, identical per-case results) costs no request.
When the bucket expires content (``workers/lifecycle.py``), an existing object older than ``refresh_after_s``
is copied onto itself instead of skipped, and a remembered key is trusted only that long: an event written
now never references an object about to expire.
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from schemas.content import KEY_PREFIX, content_key, content_url
from schemas.errors import RewardstreamError, exception_line
from schemas.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

#: S3 error codes that are the service's fault and worth retrying.
RETRIABLE_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "RequestTimeout",
        "OperationAborted",
        "XMinioServerNotInitialized",
    }
)
#: How many keys known to exist a store remembers (skips the existence check; ~100 bytes each).
KNOWN_KEYS = 65_536


class ArtifactError(RewardstreamError):
    """An artifact could not be stored or read (after retries, or for a reason retrying cannot fix).

    ``outage`` is True when S3 was unreachable or failing until the retry budget ran out or the store was
    stopped: the work must be redone later, never dead-lettered or reported as failed.
    """

    def __init__(self, message: str, *, outage: bool = False) -> None:
        super().__init__(message)
        self.outage = outage


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often to retry an S3 outage."""

    initial_s: float = 0.2
    max_s: float = 5.0
    max_elapsed_s: float = 300.0  # math.inf: until the store's stop event is set

    @classmethod
    def until_stopped(cls) -> RetryPolicy:
        """Retry an outage for as long as it lasts, until the store's ``stop`` is set (workers)."""
        return cls(max_elapsed_s=math.inf)


@dataclass(frozen=True)
class StoredArtifact:
    """Where an artifact is: its URL for events, key, digest and size."""

    url: str
    bucket: str
    key: str
    sha256: str
    size: int
    uploaded: bool  # False when the content was already there


def parse_url(url: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> (bucket, key)."""
    if not url.startswith("s3://") or "/" not in url[5:]:
        raise ArtifactError(f"not an s3:// artifact URL: {url!r}")
    bucket, key = url[5:].split("/", 1)
    return bucket, key


def is_retriable(exc: BaseException) -> bool:
    """Whether an exception from the minio SDK is an outage (retry) rather than a real refusal."""
    from minio.error import S3Error, ServerError

    if isinstance(exc, S3Error):
        return exc.code in RETRIABLE_CODES
    if isinstance(exc, ServerError):
        return True  # 5xx without an S3 error body
    import urllib3.exceptions

    return isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, OSError))


def _age_s(stat: Any) -> float:
    """Seconds since an object was last written (0 when S3 did not say)."""
    modified: datetime | None = getattr(stat, "last_modified", None)
    if modified is None:
        return 0.0
    return max(0.0, (datetime.now(UTC) - modified).total_seconds())


def remove_bucket(client: Any, bucket: str) -> None:
    """Delete every object of ``bucket`` and then the bucket (tests, benchmarks, a user's cleanup).

    Listed with the v1 API: s3proxy's filesystem backend (the local S3) refuses a v2 listing's continuation
    token once nested keys (``sha256/ab/...``) fill more than a page. Deleted in batches of up to 1,000."""
    from minio.deleteobjects import DeleteObject

    names = [obj.object_name for obj in client.list_objects(bucket, recursive=True, use_api_v1=True)]
    failed = list(client.remove_objects(bucket, (DeleteObject(name) for name in names)))
    if failed:
        raise ArtifactError(f"emptying bucket {bucket} failed for {len(failed)} objects: {failed[0]}")
    client.remove_bucket(bucket)


def minio_client(settings: Settings, timeout_s: float = 10.0, connections: int = 16) -> Any:
    """A Minio client with ``connections`` pooled connections that fails fast: its user does the retrying
    (``ArtifactStore`` with backoff, the S3 task registry its own)."""
    import urllib3
    from minio import Minio

    http = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s * 3),
        retries=urllib3.Retry(total=0, redirect=0),
        maxsize=connections,
    )
    return Minio(
        settings.s3.endpoint,
        access_key=settings.s3.access_key,
        secret_key=settings.s3.secret_key.get_secret_value(),
        secure=settings.s3.secure,
        region=settings.s3.region,
        http_client=http,
    )


class ArtifactStore:
    """Put and get artifacts by content; thread-safe (the minio client is)."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        *,
        retry: RetryPolicy | None = None,
        stop: threading.Event | None = None,
        on_retry: Callable[[BaseException], None] | None = None,
        refresh_after_s: float = math.inf,
    ) -> None:
        self._client = client
        self.bucket = bucket
        self._retry = retry or RetryPolicy()
        self._stop = stop or threading.Event()
        self._on_retry = on_retry
        self.refresh_after_s = refresh_after_s
        #: key -> the monotonic time until which it needs no refresh (LRU order).
        self._known: OrderedDict[str, float] = OrderedDict()
        self._known_lock = threading.Lock()

    @property
    def stopping(self) -> bool:
        """Whether the store's stop event is set (outages are then no longer retried)."""
        return self._stop.is_set()

    def start(self) -> None:
        """Create the bucket if it does not exist (idempotent, retried while S3 is down)."""
        from minio.error import S3Error

        def ensure() -> None:
            if self._client.bucket_exists(self.bucket):
                return
            try:
                self._client.make_bucket(self.bucket)
            except S3Error as exc:
                if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise

        self._with_retry(f"create bucket {self.bucket}", ensure)

    def url_for(self, sha256_hex: str) -> str:
        """The ``s3://`` URL content with this digest has (or would have)."""
        return content_url(self.bucket, sha256_hex)

    def put(self, data: bytes, content_type: str = "application/octet-stream") -> StoredArtifact:
        """Store ``data`` under its sha256 (skipping the upload if it is already there); return where."""
        digest = hashlib.sha256(data).hexdigest()
        key = content_key(digest)

        def upload() -> tuple[bool, float]:
            """(uploaded, the object's age in seconds after this call)."""
            stat = self._stat(key)
            if stat is None:
                self._client.put_object(
                    self.bucket, key, io.BytesIO(data), len(data), content_type=content_type,
                    metadata={"sha256": digest},
                )  # fmt: skip
                return True, 0.0
            age = _age_s(stat)
            if age < self.refresh_after_s:
                return False, age
            self._refresh(key, digest, stat)
            return False, 0.0

        if self._is_known(key):
            return StoredArtifact(self.url_for(digest), self.bucket, key, digest, len(data), False)
        uploaded, age = self._with_retry(f"put {key}", upload)
        self._remember(key, age)
        return StoredArtifact(self.url_for(digest), self.bucket, key, digest, len(data), uploaded)

    def _refresh(self, key: str, digest: str, stat: Any) -> None:
        """Copy the object onto itself (same bytes, metadata and content type): its age, which the bucket's
        expiry counts, starts again."""
        from minio.commonconfig import REPLACE, CopySource

        metadata = {"sha256": digest, "Content-Type": stat.content_type or "application/octet-stream"}
        self._client.copy_object(
            self.bucket, key, CopySource(self.bucket, key), metadata=metadata, metadata_directive=REPLACE
        )
        log.info("refreshed s3://%s/%s (%.1f days old) before referencing it again", self.bucket, key,
                 _age_s(stat) / 86_400)  # fmt: skip

    def _is_known(self, key: str) -> bool:
        with self._known_lock:
            fresh_until = self._known.get(key)
            if fresh_until is not None and fresh_until > time.monotonic():
                self._known.move_to_end(key)
                return True
        return False

    def _remember(self, key: str, age_s: float) -> None:
        with self._known_lock:
            self._known[key] = time.monotonic() + self.refresh_after_s - age_s
            self._known.move_to_end(key)
            while len(self._known) > KNOWN_KEYS:
                self._known.popitem(last=False)

    def put_text(self, text: str, content_type: str = "text/plain; charset=utf-8") -> StoredArtifact:
        """Store UTF-8 text (code, stdout, stderr)."""
        return self.put(text.encode("utf-8"), content_type)

    def put_json(self, value: object) -> StoredArtifact:
        """Store a JSON value (e.g. per-case results) canonically: sorted keys, so equal values share a key."""
        import orjson

        return self.put(orjson.dumps(value, option=orjson.OPT_SORT_KEYS), "application/json")

    def get(self, url: str, *, max_bytes: int | None = None) -> bytes:
        """Read an artifact back and check its bytes still match the digest in its key. ``max_bytes``: read no
        more than that (a larger object is refused, never held in memory whole: the caller named its size)."""
        bucket, key = parse_url(url)

        def download() -> bytes:
            response = self._client.get_object(bucket, key)
            try:
                return bytes(response.read() if max_bytes is None else response.read(max_bytes + 1))
            finally:
                response.close()
                response.release_conn()

        data = self._with_retry(f"get {url}", download)
        if max_bytes is not None and len(data) > max_bytes:
            raise ArtifactError(f"artifact {url} is larger than {max_bytes} bytes")
        expected = key.rsplit("/", 1)[-1]
        if key.startswith(f"{KEY_PREFIX}/") and hashlib.sha256(data).hexdigest() != expected:
            raise ArtifactError(f"artifact {url} does not match its sha256 (corrupted or overwritten)")
        return data

    def _stat(self, key: str) -> Any | None:
        """The object's stat, or None when it does not exist."""
        from minio.error import S3Error

        try:
            return self._client.stat_object(self.bucket, key)
        except S3Error as exc:
            if exc.code in ("NoSuchKey", "NoSuchObject", "ResourceNotFound"):
                return None
            raise

    def _with_retry(self, what: str, action: Callable[[], T]) -> T:
        started = time.monotonic()
        deadline = started + self._retry.max_elapsed_s
        delay = self._retry.initial_s
        while True:
            try:
                return action()
            except Exception as exc:
                if not is_retriable(exc):
                    raise ArtifactError(f"S3 {what} in {self.bucket} failed: {exception_line(exc)}") from exc
                if time.monotonic() + delay > deadline or self._stop.is_set():
                    why = " (stopping)" if self._stop.is_set() else ""
                    raise ArtifactError(
                        f"S3 {what} in {self.bucket} still failing after {time.monotonic() - started:.0f}s{why}: "
                        f"{exception_line(exc)}",
                        outage=True,
                    ) from exc
                log.warning("S3 %s failed, retrying in %.1fs: %s", what, delay, exception_line(exc))
                if self._on_retry is not None:
                    self._on_retry(exc)
                self._stop.wait(delay)
                delay = min(delay * 2, self._retry.max_s)
