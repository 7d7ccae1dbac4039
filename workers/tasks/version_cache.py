"""Task versions a worker fetched from the S3 registry, kept on its local disk by content, within a byte budget.

Why by version: a version is the digest of the task's content and never changes once stored, so a cached one
can never be stale; a worker asked for a version it does not hold fetches it, and the ``latest`` pointer is
never cached. Why on disk: every worker process of a host (and the next one after a restart) shares what one
fetched, instead of each asking S3 for the same tasks. What is read back is checked by the registry as if it
came from S3 (a full task's bytes against its digest), and an entry that fails is dropped and fetched again.

Layout: ``<root>/public/<v[:2]>/<v>.json`` and ``<root>/hidden/<v[:2]>/<v>.json`` (the hidden tree 0700, its
files 0600). Past ``max_bytes`` the least recently used entries (by mtime, touched on each hit) are removed
until the cache is at most 80% full.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from schemas.registry_layout import HIDDEN_DIR, PUBLIC_DIR, is_version
from workers.tasks.files import write_atomic

#: What eviction leaves, as a share of the budget: room for many fetches before the next scan.
_LOW_WATER = 0.8


class VersionCache:
    """A bounded, content-addressed cache of task versions under ``root``; thread-safe."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._total: int | None = None  # bytes held, counted on the first write

    def path(self, version: str, *, hidden: bool) -> Path:
        if not is_version(version):
            raise ValueError(f"{version!r} is not a task version")
        return self.root / (HIDDEN_DIR if hidden else PUBLIC_DIR) / version[:2] / f"{version}.json"

    def get(self, version: str, *, hidden: bool) -> bytes | None:
        """The cached bytes of ``version`` (and the entry marked as used), or None."""
        path = self.path(version, hidden=hidden)
        try:
            data = path.read_bytes()
            os.utime(path)
        except OSError:
            return None
        return data

    def put(self, version: str, data: bytes, *, hidden: bool) -> None:
        """Keep ``data`` as ``version``; a cache that cannot be written is skipped (the next read fetches)."""
        if len(data) > self.max_bytes:
            return
        path = self.path(version, hidden=hidden)
        try:
            self._prepare(path.parent, hidden)
            write_atomic(path, data, 0o600 if hidden else 0o644)
        except OSError:
            return
        with self._lock:
            if self._total is None:
                self._total = self._scan_total()
            else:
                self._total += len(data)
            over = self._total > self.max_bytes
        if over:
            self.evict()

    def drop(self, version: str, *, hidden: bool) -> None:
        """Remove an entry that did not hold what its name says."""
        self.path(version, hidden=hidden).unlink(missing_ok=True)

    def evict(self) -> None:
        """Remove the least recently used entries until the cache holds at most 80% of its budget."""
        with self._lock:
            entries = sorted(self._entries(), key=lambda entry: entry[0])
            total = sum(size for _used, size, _path in entries)
            target = int(self.max_bytes * _LOW_WATER)
            for _used, size, path in entries:
                if total <= target:
                    break
                try:
                    path.unlink()
                except OSError:
                    continue
                total -= size
            self._total = total

    def _entries(self) -> list[tuple[int, int, Path]]:
        found: list[tuple[int, int, Path]] = []
        for part in (PUBLIC_DIR, HIDDEN_DIR):
            for path in (self.root / part).glob("*/*.json"):
                try:
                    info = path.stat()
                except OSError:
                    continue
                found.append((info.st_mtime_ns, info.st_size, path))
        return found

    def _scan_total(self) -> int:
        return sum(size for _used, size, _path in self._entries())

    def _prepare(self, directory: Path, hidden: bool) -> None:
        if directory.is_dir():
            return
        part = self.root / (HIDDEN_DIR if hidden else PUBLIC_DIR)
        part.mkdir(parents=True, exist_ok=True, mode=0o700)
        part.chmod(0o700 if hidden else 0o755)
        directory.mkdir(exist_ok=True, mode=0o700)
        directory.chmod(0o700 if hidden else 0o755)
