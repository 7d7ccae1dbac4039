"""The delta of an image task's container: one canonical spelling, its rules, and a reader that refuses the rest."""

from __future__ import annotations

import contextlib
import io
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.containers.delta import (
    EMPTY,
    DeltaCaps,
    DeltaError,
    DeltaTooLargeError,
    Entry,
    pack_delta,
    read_delta,
    restore_tar,
    topmost,
)

ENTRIES = [
    Entry("/usr/local/lib/site.py", "file", mode=0o644, mtime=1_700_000_000, data=b"x = 1\n"),
    Entry("/opt/tool", "dir", mode=0o1777, uid=1000, gid=1000),
    Entry("/opt/tool/run", "file", mode=0o755, data=b"#!/bin/sh\n"),
    Entry("/opt/tool/latest", "symlink", target="../../etc/passwd"),
]


def test_same_state_same_bytes_whatever_the_order() -> None:
    one = pack_delta(ENTRIES, ["/usr/share/doc", "/usr/share/doc/x", "/etc/motd"])
    two = pack_delta(reversed(ENTRIES), ["/etc/motd", "/usr/share/doc"])
    assert one.data == two.data
    assert one.sha256 == two.sha256
    assert one.deleted == ("/etc/motd", "/usr/share/doc")
    assert [e.path for e in one.entries] == ["/opt/tool", "/opt/tool/latest", "/opt/tool/run", "/usr/local/lib/site.py"]


def test_a_delta_reads_back_exactly() -> None:
    packed = pack_delta(ENTRIES, ["/etc/motd"])
    read = read_delta(packed.data)
    assert read == packed
    assert {e.path: e for e in read.entries}["/opt/tool"].mode == 0o1777
    assert read_delta(EMPTY.data).entries == ()


def test_modes_keep_permissions_and_sticky_only() -> None:
    packed = pack_delta([Entry("/bin/su", "file", mode=0o4755, data=b"")], [])
    with tarfile.open(fileobj=io.BytesIO(packed.data)) as tar:
        member = tar.getmember("root/bin/su")
    assert member.mode == 0o755
    assert member.uname == ""
    assert member.gname == ""


def test_the_restore_tar_names_paths_from_the_root() -> None:
    with tarfile.open(fileobj=io.BytesIO(restore_tar(pack_delta(ENTRIES, [])))) as tar:
        names = tar.getnames()
    assert names == ["opt/tool", "opt/tool/latest", "opt/tool/run", "usr/local/lib/site.py"]


@pytest.mark.parametrize(
    ("entries", "deleted", "problem"),
    [
        ([Entry("relative", "file")], [], "not absolute"),
        ([Entry("/a/../b", "file")], [], "not absolute and normalised"),
        ([Entry("/", "dir")], [], "not absolute"),
        ([Entry("/a\nb", "file")], [], "newline"),
        ([Entry("/" + "a" * 256, "file")], [], "over 255 bytes"),
        ([Entry("/a", "file"), Entry("/a", "dir")], [], "twice"),
        ([Entry("/a", "file"), Entry("/a/b", "file")], [], "not a directory"),
        ([Entry("/a", "symlink", target="/"), Entry("/a/b", "file")], [], "not a directory"),
        ([Entry("/a", "dir", data=b"x")], [], "with data"),
        ([Entry("/a", "symlink")], [], "to nothing"),
        ([Entry("/a", "file", uid=-1)], [], "out of range"),
        ([Entry("/a", "file")], ["/a"], "both deleted and changed"),
        ([], ["etc"], "not absolute"),
    ],
)
def test_broken_rules_are_named(entries: list[Entry], deleted: list[str], problem: str) -> None:
    with pytest.raises(DeltaError, match=problem):
        pack_delta(entries, deleted)


def test_caps_hold() -> None:
    with pytest.raises(DeltaTooLargeError, match="over 10"):
        pack_delta([Entry("/a", "file", data=b"x" * 11)], [], DeltaCaps(max_bytes=10))
    with pytest.raises(DeltaTooLargeError, match="over 2"):
        pack_delta([Entry("/a", "file"), Entry("/b", "file")], ["/c"], DeltaCaps(max_entries=2))
    with pytest.raises(DeltaTooLargeError):
        read_delta(pack_delta([Entry("/a", "file", data=b"x" * 11)], []).data, DeltaCaps(max_bytes=10))


def _tar(*members: tuple[str, bytes, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type, info.size = kind, len(data)
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "not a delta"),
        (b"not a tar at all" * 100, "not a delta"),
        (_tar(("root/a", tarfile.REGTYPE, b"")), "starts with its 'deleted' list"),
        (_tar(("deleted", tarfile.REGTYPE, b"{}")), "not a list of paths"),
        (_tar(("deleted", tarfile.REGTYPE, b"[")), "not a delta"),
        (_tar(("deleted", tarfile.REGTYPE, b"[]"), ("etc/x", tarfile.REGTYPE, b"")), "outside root/"),
        (_tar(("deleted", tarfile.REGTYPE, b"[]"), ("root/x", tarfile.FIFOTYPE, b"")), "files and symlinks only"),
        (_tar(("deleted", tarfile.REGTYPE, b"[]"), ("root/x", tarfile.LNKTYPE, b"")), "files and symlinks only"),
        (_tar(("deleted", tarfile.REGTYPE, b"[]"), ("root/x", tarfile.CHRTYPE, b"")), "files and symlinks only"),
        (
            _tar(
                ("deleted", tarfile.REGTYPE, b"[]"), ("root/b", tarfile.REGTYPE, b""), ("root/a", tarfile.REGTYPE, b"")
            ),
            "not a canonical delta",
        ),
    ],
)
def test_what_is_not_a_canonical_delta_is_refused(data: bytes, problem: str) -> None:
    with pytest.raises(DeltaError, match=problem):
        read_delta(data)


def test_nested_deletions_keep_the_topmost() -> None:
    assert topmost(["/a/b", "/a", "/ab", "/a/b/c", "/b"]) == ["/a", "/ab", "/b"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096))
def test_any_bytes_are_a_delta_or_a_delta_error(data: bytes) -> None:
    with contextlib.suppress(DeltaError):
        read_delta(data)


_names = st.text(st.characters(codec="utf-8", exclude_characters="/\n\r\x00"), min_size=1, max_size=8).filter(
    lambda n: n not in (".", "..")
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(_names, min_size=1, max_size=3), st.binary(max_size=64)), max_size=8))
def test_any_valid_delta_reads_back_as_itself(files: list[tuple[list[str], bytes]]) -> None:
    entries: dict[str, Entry] = {}
    for parts, data in files:
        for depth in range(1, len(parts)):
            entries.setdefault("/" + "/".join(parts[:depth]), Entry("/" + "/".join(parts[:depth]), "dir"))
        path = "/" + "/".join(parts)
        entries.setdefault(path, Entry(path, "file", data=data))
    try:
        packed = pack_delta(entries.values(), [])
    except DeltaError:
        return  # a name both a file and a directory's parent: refused, as it must be
    assert read_delta(packed.data) == packed
