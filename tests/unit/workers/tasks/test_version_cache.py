"""The worker's local cache of task versions: by content, hidden entries private, bounded (least recently used
entries go first)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from workers.tasks.version_cache import VersionCache


def version(n: int) -> str:
    return f"{n:064x}"


def test_entries_are_kept_by_version_and_kind(tmp_path: Path) -> None:
    cache = VersionCache(tmp_path, 1_000_000)
    cache.put(version(1), b"public", hidden=False)
    cache.put(version(1), b"hidden", hidden=True)
    assert cache.get(version(1), hidden=False) == b"public"
    assert cache.get(version(1), hidden=True) == b"hidden"
    assert cache.get(version(2), hidden=False) is None
    cache.drop(version(1), hidden=True)
    assert cache.get(version(1), hidden=True) is None
    assert cache.get(version(1), hidden=False) == b"public"


def test_hidden_entries_are_private(tmp_path: Path) -> None:
    cache = VersionCache(tmp_path, 1_000_000)
    cache.put(version(1), b"hidden", hidden=True)
    cache.put(version(2), b"public", hidden=False)
    assert stat.S_IMODE(cache.path(version(1), hidden=True).stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.path(version(1), hidden=True).parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "hidden").stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.path(version(2), hidden=False).stat().st_mode) == 0o644


def test_what_is_not_a_version_names_no_file(tmp_path: Path) -> None:
    cache = VersionCache(tmp_path, 1_000)
    with pytest.raises(ValueError, match="is not a task version"):
        cache.path("../../etc/passwd", hidden=False)


def test_past_its_budget_the_least_recently_used_go(tmp_path: Path) -> None:
    cache = VersionCache(tmp_path, 1_000)
    for n in range(9):
        cache.put(version(n), b"x" * 100, hidden=False)
        os.utime(cache.path(version(n), hidden=False), ns=(n * 10**9, n * 10**9))
    os.utime(cache.path(version(0), hidden=False), ns=(10**12, 10**12))  # the oldest entry was just used
    cache.put(version(9), b"x" * 100, hidden=False)
    cache.put(version(10), b"x" * 100, hidden=False)  # 1,100 bytes: over the budget, down to 800
    kept = [n for n in range(11) if cache.get(version(n), hidden=False) is not None]
    assert len(kept) == 8
    assert 0 in kept
    assert 10 in kept
    assert 1 not in kept
    assert 2 not in kept
    assert 3 not in kept


def test_an_entry_larger_than_the_budget_is_not_kept(tmp_path: Path) -> None:
    cache = VersionCache(tmp_path, 10)
    cache.put(version(1), b"x" * 11, hidden=False)
    assert cache.get(version(1), hidden=False) is None


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    cache = VersionCache(blocker / "cache", 1_000)
    cache.put(version(1), b"x", hidden=False)  # no error: the next read fetches
    assert cache.get(version(1), hidden=False) is None
