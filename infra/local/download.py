"""Downloads from Maven Central, verified against the checksums Maven Central publishes.

A file lands in the cache only after its checksum matched; a partial or corrupt download never does.
"""

from __future__ import annotations

import hashlib
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from schemas.errors import PlatformError

_CHUNK = 1 << 20


def maven_url(base: str, group: str, artifact: str, version: str, filename: str) -> str:
    """The URL of one file of a Maven artifact."""
    return f"{base.rstrip('/')}/{group.replace('.', '/')}/{artifact}/{version}/{filename}"


def require_free_space(directory: Path, needed_mb: int) -> None:
    """Fail early, with what to do, when the disk cannot hold what is about to be written."""
    directory.mkdir(parents=True, exist_ok=True)
    free_mb = shutil.disk_usage(directory).free // (1 << 20)
    if free_mb < needed_mb:
        raise PlatformError(
            f"not enough free disk in {directory}: need {needed_mb} MB, have {free_mb} MB; "
            "free some space or point RS_CACHE_DIR at a larger disk"
        )


def _fetch_text(url: str, timeout: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (https URL from settings)
            return str(response.read().decode("ascii", "replace"))
    except urllib.error.HTTPError as exc:
        exc.close()
        raise PlatformError(f"cannot download {url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise PlatformError(f"cannot download {url}: {exc}; check network access to RS_MAVEN_URL") from exc


def _published_checksum(url: str, timeout: float) -> tuple[str, str]:
    """(algorithm, hex digest) from the strongest checksum file published next to ``url``."""
    last_error: PlatformError | None = None
    for algorithm in ("sha512", "sha256", "sha1"):
        try:
            text = _fetch_text(f"{url}.{algorithm}", timeout)
        except PlatformError as exc:
            last_error = exc
            continue
        digest = text.strip().split()[0].lower() if text.strip() else ""
        if digest:
            return algorithm, digest
    raise PlatformError(f"no published checksum for {url}") from last_error


def fetch_verified(url: str, dest: Path, *, needed_mb: int = 200, timeout: float = 60.0) -> Path:
    """Download ``url`` to ``dest`` unless a verified copy is already there; return ``dest``."""
    algorithm, expected = _published_checksum(url, timeout)
    if dest.exists() and _digest(dest, algorithm) == expected:
        return dest
    require_free_space(dest.parent, needed_mb)
    partial = dest.with_name(dest.name + ".partial")
    hasher = hashlib.new(algorithm)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, partial.open("wb") as out:  # noqa: S310
            while chunk := response.read(_CHUNK):
                hasher.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise PlatformError(f"cannot download {url}: {exc}; check network access and free disk") from exc
    actual = hasher.hexdigest()
    if actual != expected:
        partial.unlink(missing_ok=True)
        raise PlatformError(f"checksum mismatch for {url}: {algorithm} {actual} != published {expected}")
    partial.replace(dest)
    return dest


def _digest(path: Path, algorithm: str) -> str:
    hasher = hashlib.new(algorithm)
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()
