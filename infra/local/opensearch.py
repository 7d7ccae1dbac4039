"""OpenSearch 2.19.x from the integ-test-zip on Maven Central: single node, loopback, heap 512m, non-root.

OpenSearch refuses to run as root. When ``up`` runs as root, the node runs as the system user
``rewardstream`` and its files live under that user's home (``/var/lib/rewardstream/<cache-dir hash>``),
because the root cache dir (``/root/.cache``) is not reachable by another user.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import shutil
import subprocess
import zipfile
from pathlib import Path
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
from infra.local.versions import OPENSEARCH_TRANSPORT_PORT_OFFSET, OPENSEARCH_VERSION
from schemas.caps import QUOTE_CHARS
from schemas.errors import PlatformError
from schemas.settings import Settings

SERVICE_USER = "rewardstream"
SERVICE_HOME = Path("/var/lib/rewardstream")


class OpenSearchService(ProcessService):
    """A single-node OpenSearch on loopback."""

    name = "opensearch"

    def __init__(self, settings: Settings, paths: PlatformPaths) -> None:
        super().__init__(settings, paths, *split_host_port(settings.opensearch.url, 9200))
        self._base = service_base(paths.root)
        base = self._base
        self._home = base / "dist" / f"opensearch-{OPENSEARCH_VERSION}"
        self._conf = base / "data" / "opensearch" / "config"

    @property
    def endpoint(self) -> str:
        return self._settings.opensearch.url

    def ports(self) -> list[PortClaim]:
        transport = self._port + OPENSEARCH_TRANSPORT_PORT_OFFSET
        return [
            PortClaim("OpenSearch", self._host, self._port, "RS_OPENSEARCH_URL"),
            PortClaim("OpenSearch's transport", self._host, transport, "RS_OPENSEARCH_URL"),
        ]

    def installed(self) -> bool:
        return (self._home / ".complete").exists()

    def install(self) -> None:
        done = self._home / ".complete"
        if done.exists():
            return
        filename = f"opensearch-{OPENSEARCH_VERSION}.zip"
        url = maven_url(
            self._settings.local.maven_url,
            "org.opensearch.distribution.integ-test-zip", "opensearch", OPENSEARCH_VERSION, filename,
        )  # fmt: skip
        archive = fetch_verified(url, self._paths.downloads / filename, needed_mb=600)
        self._home.parent.mkdir(parents=True, exist_ok=True)
        staging = self._home.with_name(self._home.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        _unzip_preserving_modes(archive, staging)
        inner = next(staging.iterdir())
        shutil.rmtree(self._home, ignore_errors=True)
        inner.replace(self._home)
        shutil.rmtree(staging, ignore_errors=True)
        done.write_text(OPENSEARCH_VERSION)

    def _write_config(self) -> None:
        data = self._base / "data" / "opensearch"
        if not self._conf.exists():
            shutil.copytree(self._home / "config", self._conf)
        (data / "nodes").mkdir(parents=True, exist_ok=True)
        (data / "logs").mkdir(parents=True, exist_ok=True)
        transport = self._port + OPENSEARCH_TRANSPORT_PORT_OFFSET
        config = {
            "cluster.name": "rewardstream-local",
            "node.name": "rewardstream-local-1",
            "network.host": self._host,
            "http.port": str(self._port),
            "transport.port": str(transport),
            "discovery.type": "single-node",
            "path.data": str(data / "nodes"),
            "path.logs": str(data / "logs"),
            # A developer's nearly full disk must not flip test indices to read-only.
            "cluster.routing.allocation.disk.threshold_enabled": "false",
            "action.destructive_requires_name": "true",
        }
        (self._conf / "opensearch.yml").write_text("".join(f"{k}: {v}\n" for k, v in config.items()))
        if os.geteuid() == 0:
            _ensure_service_user()
            _chown_tree(self._base / "data", SERVICE_USER)
            _chown_tree(self._home, SERVICE_USER)

    def start(self) -> None:
        java = self._java_to_start()
        if java is None:
            return
        self._write_config()
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "OPENSEARCH_JAVA_HOME": str(java_home_of(java)),
            "OPENSEARCH_PATH_CONF": str(self._conf),
            "OPENSEARCH_JAVA_OPTS": "-Xms512m -Xmx512m -XX:+UseG1GC",
            "LANG": "C.UTF-8",
            "HOME": str(self._base),
        }
        user = SERVICE_USER if os.geteuid() == 0 else None
        argv = [str(self._home / "bin" / "opensearch")]
        self._process.start(argv, env=env, cwd=self._home, user=user)

    def health(self) -> Health:
        from opensearchpy import OpenSearch

        details: dict[str, Any] = {"managed_pid": self._process.pid(), "version": OPENSEARCH_VERSION}
        if self.is_local() and (reason := unreachable_reason("OpenSearch", self._host, self._port)):
            return Health(False, self.endpoint, reason, details)
        auth = None
        if self._settings.opensearch.username and self._settings.opensearch.password is not None:
            auth = (self._settings.opensearch.username, self._settings.opensearch.password.get_secret_value())
        client = OpenSearch(
            hosts=[self.endpoint],
            http_auth=auth,
            verify_certs=self._settings.opensearch.verify_certs,
            timeout=self._settings.local.health_timeout_s,
            max_retries=0,
        )
        try:
            health = client.cluster.health()
        except Exception as exc:
            reason = _opensearch_reason(exc, self.endpoint)
            fatal = getattr(exc, "status_code", None) in (401, 403)
            return Health(False, self.endpoint, reason, details, fatal=fatal)
        finally:
            client.close()
        details["cluster_status"] = health.get("status")
        if health.get("status") not in ("green", "yellow"):
            return Health(False, self.endpoint, f"OpenSearch cluster status is {health.get('status')}", details)
        return Health(True, self.endpoint, None, details)


def service_base(cache_root: Path) -> Path:
    """Where OpenSearch's files live: the cache dir, or (as root) a per-cache dir the service user owns."""
    if os.geteuid() != 0:
        return cache_root
    digest = hashlib.sha256(str(cache_root.resolve()).encode()).hexdigest()[:10]
    return SERVICE_HOME / digest


def _opensearch_reason(exc: Exception, endpoint: str) -> str:
    status = getattr(exc, "status_code", None)
    if status in (401, 403):
        return f"OpenSearch at {endpoint} rejected the credentials: check RS_OPENSEARCH_USERNAME/PASSWORD"
    first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"OpenSearch does not answer at {endpoint}: {first_line[:QUOTE_CHARS]}"


def _unzip_preserving_modes(archive: Path, dest: Path) -> None:
    """Unzip keeping the executable bits (zipfile alone drops them)."""
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            target = (dest / info.filename).resolve()
            if not str(target).startswith(str(dest.resolve())):
                raise PlatformError(f"refusing to unpack {info.filename!r} outside {dest}")
            zf.extract(info, dest)
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                target.chmod(mode)


def _ensure_service_user() -> None:
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError:
        result = subprocess.run(
            ["useradd", "--system", "--home-dir", str(SERVICE_HOME), "--shell", "/usr/sbin/nologin", SERVICE_USER],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise PlatformError(f"cannot create the service user {SERVICE_USER!r}: {result.stderr.strip()}") from None


def _chown_tree(root: Path, user: str) -> None:
    uid = pwd.getpwnam(user).pw_uid
    gid = grp.getgrnam(user).gr_gid
    SERVICE_HOME.mkdir(parents=True, exist_ok=True)
    os.chown(SERVICE_HOME, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        os.chown(dirpath, uid, gid)
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)
