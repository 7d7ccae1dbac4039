"""The workspace cache's bookkeeping (the S3 side is the artifact store's, tested against a real S3 server in
tests/integration/test_artifacts.py); here a dict stands in for the bucket."""

from __future__ import annotations

import hashlib

import pytest

from workers.artifacts import ArtifactError, StoredArtifact
from workers.episodes.snapshot import Packed
from workers.episodes.workspaces import Workspaces


class DictStore:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.puts = 0

    def url_for(self, sha256_hex: str) -> str:
        return f"s3://bucket/sha256/{sha256_hex}"

    def put(self, data: bytes, content_type: str = "application/octet-stream") -> StoredArtifact:
        digest = hashlib.sha256(data).hexdigest()
        self.puts += 1
        self.objects[self.url_for(digest)] = data
        return StoredArtifact(self.url_for(digest), "bucket", f"sha256/{digest}", digest, len(data), True)

    def get(self, url: str, *, max_bytes: int | None = None) -> bytes:
        if url not in self.objects:
            raise ArtifactError(f"no such artifact {url}")
        data = self.objects[url]
        if max_bytes is not None and len(data) > max_bytes:
            raise ArtifactError(f"artifact {url} is larger than {max_bytes} bytes")
        return data


def _packed(data: bytes) -> Packed:
    return Packed(data, hashlib.sha256(data).hexdigest(), files=1, bytes=len(data))


def test_a_stored_snapshot_is_read_back_from_memory_without_a_download() -> None:
    store = DictStore()
    workspaces = Workspaces(store, max_bytes=1000)
    snap = _packed(b"a" * 100)
    assert workspaces.put(snap) == f"s3://bucket/sha256/{snap.sha256}"
    assert workspaces.get(snap.sha256) == snap.data
    assert workspaces.downloads == 0


def test_another_workers_snapshot_is_downloaded_once_then_kept() -> None:
    store = DictStore()
    snap = _packed(b"b" * 100)
    Workspaces(store).put(snap)  # the worker that ran the previous step
    here = Workspaces(store, max_bytes=1000)
    assert here.get(snap.sha256) == snap.data
    assert here.get(snap.sha256) == snap.data
    assert here.downloads == 1


def test_the_least_recently_used_go_first_and_an_oversized_one_is_not_kept() -> None:
    store = DictStore()
    workspaces = Workspaces(store, max_bytes=250)
    first, second, third = (_packed(bytes([n]) * 100) for n in (1, 2, 3))
    workspaces.put(first)
    workspaces.put(second)
    workspaces.get(first.sha256)  # first is now the most recent
    workspaces.put(third)  # 300 > 250: second goes
    assert workspaces.downloads == 0
    workspaces.get(first.sha256)
    workspaces.get(third.sha256)
    assert workspaces.downloads == 0
    workspaces.get(second.sha256)
    assert workspaces.downloads == 1
    huge = _packed(b"h" * 300)
    workspaces.put(huge)
    workspaces.get(huge.sha256)
    assert workspaces.downloads == 2  # larger than the whole cache: always from S3


def test_a_snapshot_s3_does_not_have_is_an_error_not_an_empty_workspace() -> None:
    with pytest.raises(ArtifactError, match="no such artifact"):
        Workspaces(DictStore()).get("0" * 64)
