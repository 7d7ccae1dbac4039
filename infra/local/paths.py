"""Where the local platform keeps downloads, data, logs and pid files (all outside the repo)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PlatformPaths:
    """Layout of the cache dir (``RS_CACHE_DIR``, default ``~/.cache/rewardstream``)."""

    root: Path

    @property
    def downloads(self) -> Path:
        return self.root / "downloads"

    @property
    def dist(self) -> Path:
        """Unpacked distributions (Kafka libs, OpenSearch, s3proxy)."""
        return self.root / "dist"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        """Pid files of the processes ``rewardstream up`` started."""
        return self.root / "run"

    @property
    def maven_repo(self) -> Path:
        return self.root / "m2"

    def ensure(self) -> None:
        """Create every directory (idempotent)."""
        for path in (self.downloads, self.dist, self.data, self.logs, self.run, self.maven_repo):
            path.mkdir(parents=True, exist_ok=True)


#: Parts of a cache dir that another cache dir may share: downloads, unpacked distributions, the sandbox rootfs.
SHARED_CACHE_PARTS = ("downloads", "m2", "dist", "sandbox")


def shared_cache(directory: Path, main: Path) -> Path:
    """A cache dir of its own under ``directory`` (pid files, logs, tasks, data) that links the shareable parts
    of ``main``: a second platform, a test or a benchmark never downloads or builds a rootfs again (a rootfs
    build is slow, and a killed one is cleaned up by its mount namespace only)."""
    cache = directory / "cache"
    if cache.is_dir():
        return cache
    cache.mkdir(parents=True)
    for part in SHARED_CACHE_PARTS:
        (main / part).mkdir(parents=True, exist_ok=True)
        (cache / part).symlink_to(main / part)
    return cache
