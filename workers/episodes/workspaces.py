"""Episode workspaces by content: every committed snapshot in S3 (the artifact store, keyed by its sha256),
the recently used ones kept in the worker's memory.

Why both: S3 is what makes a step re-runnable on any worker after any crash (a snapshot is uploaded before
the observation that names it is committed, and an object that is already there is not uploaded again);
the memory cache is the common case, where an episode's next step lands on the worker that ran its last one
and downloads nothing. Bytes from S3 are checked against their key by the store, so a snapshot is exactly
the one its observation named.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

from workers.artifacts import StoredArtifact
from workers.episodes.snapshot import Packed

#: Memory a worker gives recently used snapshots by default (a 64 MiB workspace cap: at least 4 episodes).
DEFAULT_CACHE_BYTES = 256 << 20


class Store(Protocol):
    """What of ``workers.artifacts.ArtifactStore`` the workspaces use."""

    def put(self, data: bytes, content_type: str = ...) -> StoredArtifact: ...

    def get(self, url: str) -> bytes: ...

    def url_for(self, sha256_hex: str) -> str: ...


class Workspaces:
    """Snapshots by sha256; thread-safe. ``max_bytes`` bounds the memory cache (least recently used go first;
    a snapshot larger than the whole cache is not kept)."""

    def __init__(self, store: Store, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self._store = store
        self._max_bytes = max_bytes
        self._cached: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.downloads = 0

    def put(self, packed: Packed) -> str:
        """Store a snapshot (uploaded unless S3 has it already) and keep it at hand; its ``s3://`` URL."""
        stored = self._store.put(packed.data, "application/x-tar")
        self._keep(packed.sha256, packed.data)
        return stored.url

    def get(self, sha256_hex: str) -> bytes:
        """The snapshot with this digest, from memory or else from S3 (checked against its key)."""
        with self._lock:
            data = self._cached.get(sha256_hex)
            if data is not None:
                self._cached.move_to_end(sha256_hex)
                return data
        data = self._store.get(self._store.url_for(sha256_hex))
        with self._lock:
            self.downloads += 1
        self._keep(sha256_hex, data)
        return data

    def url_for(self, sha256_hex: str) -> str:
        return self._store.url_for(sha256_hex)

    def _keep(self, sha256_hex: str, data: bytes) -> None:
        if len(data) > self._max_bytes:
            return
        with self._lock:
            if sha256_hex in self._cached:
                self._cached.move_to_end(sha256_hex)
                return
            self._cached[sha256_hex] = data
            self._bytes += len(data)
            while self._bytes > self._max_bytes:
                _, dropped = self._cached.popitem(last=False)
                self._bytes -= len(dropped)
