"""An S3-compatible server with data on disk: s3proxy's filesystem backend, from Maven Central.

Clients use it through the ``minio`` SDK exactly as they would use production MinIO.
"""

from __future__ import annotations

from typing import Any

from infra.local.download import fetch_verified, maven_url
from infra.local.java import java_home_of
from infra.local.paths import PlatformPaths
from infra.local.service import (
    Health,
    PortClaim,
    ProcessService,
    split_host_port,
    unreachable_reason,
)
from infra.local.versions import S3PROXY_VERSION
from schemas.caps import QUOTE_CHARS
from schemas.settings import Settings

_CREDENTIAL_ERRORS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied"})


class S3Service(ProcessService):
    """s3proxy on loopback, objects stored as files under the cache dir."""

    name = "s3"

    def __init__(self, settings: Settings, paths: PlatformPaths) -> None:
        super().__init__(settings, paths, *split_host_port(settings.s3.endpoint, 9000))
        self._data = paths.data / "s3"
        self._properties = self._data / "s3proxy.properties"
        self._jar = paths.dist / f"s3proxy-{S3PROXY_VERSION}-jar-with-dependencies.jar"

    @property
    def endpoint(self) -> str:
        return self._settings.s3.endpoint

    def ports(self) -> list[PortClaim]:
        return [PortClaim("S3", self._host, self._port, "RS_S3_ENDPOINT")]

    def installed(self) -> bool:
        return self._jar.exists()

    def install(self) -> None:
        filename = self._jar.name
        url = maven_url(self._settings.local.maven_url, "org.gaul", "s3proxy", S3PROXY_VERSION, filename)
        if not self._jar.exists():
            fetch_verified(url, self._jar, needed_mb=200)

    def _write_config(self) -> None:
        (self._data / "buckets").mkdir(parents=True, exist_ok=True)
        config = {
            "s3proxy.endpoint": f"http://{self._host}:{self._port}",
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self._settings.s3.access_key,
            "s3proxy.credential": self._settings.s3.secret_key.get_secret_value(),
            "jclouds.provider": "filesystem",
            "jclouds.filesystem.basedir": str(self._data / "buckets"),
            "jclouds.region": self._settings.s3.region,
        }
        self._properties.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        self._properties.chmod(0o600)

    def start(self) -> None:
        java = self._java_to_start()
        if java is None:
            return
        self._write_config()
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "JAVA_HOME": str(java_home_of(java)),
            "LANG": "C.UTF-8",
        }
        argv = [
            str(java), "-Xms64m", "-Xmx256m", "-XX:+UseSerialGC",
            "-jar", str(self._jar), "--properties", str(self._properties),
        ]  # fmt: skip
        self._process.start(argv, env=env, cwd=self._data)

    def health(self) -> Health:
        from minio import Minio
        from minio.error import S3Error
        from urllib3 import PoolManager, Timeout

        details: dict[str, Any] = {"managed_pid": self._process.pid(), "version": S3PROXY_VERSION}
        if self.is_local() and (reason := unreachable_reason("S3", self._host, self._port)):
            return Health(False, self.endpoint, reason, details)
        timeout = self._settings.local.health_timeout_s
        client = Minio(
            self.endpoint,
            access_key=self._settings.s3.access_key,
            secret_key=self._settings.s3.secret_key.get_secret_value(),
            secure=self._settings.s3.secure,
            region=self._settings.s3.region,
            http_client=PoolManager(timeout=Timeout(connect=timeout, read=timeout), retries=False),
        )
        try:
            buckets = client.list_buckets()
        except S3Error as exc:
            if exc.code in _CREDENTIAL_ERRORS:
                reason = (
                    f"S3 at {self.endpoint} rejected the credentials ({exc.code}): "
                    "check RS_S3_ACCESS_KEY/RS_S3_SECRET_KEY"
                )
                return Health(False, self.endpoint, reason, details, fatal=True)
            reason = f"S3 at {self.endpoint} answered with an error: {exc.code}"
            return Health(False, self.endpoint, reason, details)
        except Exception as exc:
            first = str(exc).splitlines()[0][:QUOTE_CHARS] if str(exc) else type(exc).__name__
            return Health(False, self.endpoint, f"S3 does not answer at {self.endpoint}: {first}", details)
        details["buckets"] = len(buckets)
        return Health(True, self.endpoint, None, details)
