"""The versions a trainer pins its generations to when the task registry is in S3 (``RS_TASKS_REGISTRY``).

Why: a generation that names its task's version is graded by every role against that one version (never a
stale or a mixed one). With a registry directory the SDK reads the task's ``latest`` file
(``schemas.registry_layout.LatestVersions``, a ``stat`` per call); with a registry in a bucket the pointer is
an object (``public/latest/<name>``, ``schemas.registry_s3``), and a GET per published generation would put a
round trip to S3 in every ``send``. So each task's pointer is read at most once per ``ttl_s`` (1 s): a load is
seen by the trainer within that, and a generation published meanwhile is pinned to the version before it, the
one its reward then names (``ttl_s=0`` reads the pointer at each publish).

What cannot be told is None (the generation goes unpinned and the roles take the latest, as before): no such
task, a pointer that names no version, S3 failing (remembered for ``ttl_s`` too, so an outage costs one
timeout per task per ``ttl_s``, not one per generation, and logged once until S3 answers again).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from schemas.registry_s3 import POINTER_MAX, RegistryLocation, pointer_version
from schemas.settings import S3Settings

log = logging.getLogger("rewardstream.sdk")

DEFAULT_TTL_S = 1.0
#: How long one pointer read may take (connect, then read): the trainer's ``send`` waits on it.
TIMEOUT_S = 3.0
_MEMO = 65_536
#: What a fetch returns: the pointer's bytes, or None when there is no such object. Raises on any failure.
Fetch = Callable[[str], bytes | None]


class S3LatestVersions:
    """``task_id -> its latest version`` from the registry at ``s3://bucket/prefix``, each task's read at most
    once per ``ttl_s``; None when it cannot tell. Thread-safe."""

    def __init__(
        self,
        location: RegistryLocation,
        fetch: Fetch,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.location = location
        self.ttl_s = ttl_s
        self._fetch = fetch
        self._clock = clock
        self._known: dict[str, tuple[float, str | None]] = {}
        self._lock = threading.Lock()
        self._failing = False

    @classmethod
    def open(cls, url: str, s3: S3Settings, *, ttl_s: float = DEFAULT_TTL_S) -> S3LatestVersions:
        """The registry at ``url`` through the S3 endpoint and credentials of ``s3`` (a trainer's: the public
        part is all it reads). ConfigError for a URL that names no bucket."""
        location = RegistryLocation.parse(url)
        return cls(location, _MinioFetch(s3, location.bucket), ttl_s=ttl_s)

    def __repr__(self) -> str:
        return f"S3LatestVersions({self.location.url!r}, ttl_s={self.ttl_s})"

    def __call__(self, task_id: str) -> str | None:
        now = self._clock()
        with self._lock:
            known = self._known.get(task_id)
        if known is not None and now - known[0] < self.ttl_s:
            return known[1]
        try:
            key = self.location.latest_key(task_id)
        except ValueError:  # no task id can have this name: never in the registry
            return None
        version = self._read(key)
        with self._lock:
            if len(self._known) >= _MEMO:
                self._known.clear()
            self._known[task_id] = (now, version)
        return version

    def _read(self, key: str) -> str | None:
        try:
            data = self._fetch(key)
        except Exception as exc:  # any S3 or network failure: unpinned, said once per outage
            if not self._failing:
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                where = f"s3://{self.location.bucket}/{key}"
                log.warning("cannot read %s (generations go unpinned until it can): %s", where, reason)
            self._failing = True
            return None
        if self._failing:
            log.info("reading the task registry at %s again", self.location.url)
            self._failing = False
        return None if data is None else pointer_version(data)


class _MinioFetch:
    """GET of one small object by key, failing fast (no retry: the cache above retries after ``ttl_s``)."""

    def __init__(self, s3: S3Settings, bucket: str) -> None:
        self.s3 = s3
        self.bucket = bucket
        self._client: Any = None
        self._lock = threading.Lock()

    def __call__(self, key: str) -> bytes | None:
        from minio.error import S3Error

        try:
            response = self._minio().get_object(self.bucket, key)
        except S3Error as exc:
            if exc.code in ("NoSuchKey", "NoSuchObject"):
                return None
            raise
        try:
            return bytes(response.read(POINTER_MAX + 1))
        finally:
            response.close()
            response.release_conn()

    def _minio(self) -> Any:
        with self._lock:
            if self._client is None:
                import urllib3
                from minio import Minio  # imported on first use: a directory registry never needs it

                http = urllib3.PoolManager(
                    timeout=urllib3.Timeout(connect=TIMEOUT_S, read=TIMEOUT_S),
                    retries=urllib3.Retry(total=0, redirect=0),
                    maxsize=4,
                )
                s3 = self.s3
                self._client = Minio(s3.endpoint, access_key=s3.access_key, secret_key=s3.secret_key.get_secret_value(),
                                     secure=s3.secure, region=s3.region, http_client=http)  # fmt: skip
            return self._client
