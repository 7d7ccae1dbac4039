"""Workspace snapshots against hostile workspaces and hostile snapshots (pure: files on the host, no sandbox).

What an agent leaves in its workspace is packed without following anything; what a snapshot holds is
restored without writing anywhere but under the destination. Only files, directories and links survive.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import socket
import stat
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.episodes.snapshot import Caps, SnapshotError, SnapshotTooLargeError, pack, unpack


def tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def listing(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry under root, by relative name: ('f', content) / ('d', '') / ('l', target), not following."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("l", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("d", "")
            else:
                out[rel] = ("f", path.read_bytes())
    return out


def crafted(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, *, mode: int = 0o644, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    return info


def test_a_round_trip_keeps_files_dirs_links_and_exec_bits(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"calc/__init__.py": b"", "calc/ops.py": b"def add(a, b):\n    return a - b\n",
                                  "tests/test_ops.py": b"x", "run.sh": b"#!/bin/sh\n"})  # fmt: skip
    (src / "run.sh").chmod(0o755)
    (src / "empty").mkdir()
    (src / "link").symlink_to("calc/ops.py")
    packed = pack(src)
    dest = tmp_path / "dest"
    dest.mkdir()
    assert unpack(packed.data, dest) == 8  # 3 dirs, 4 files, 1 link
    assert listing(dest) == listing(src)
    assert (dest / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (dest / "calc/ops.py").stat().st_mode & 0o777 == 0o644
    assert pack(dest).sha256 == packed.sha256  # deterministic: same content, same address


def test_pack_stores_links_as_links_and_drops_what_is_not_a_file(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"a.txt": b"a"})
    (src / "passwd").symlink_to("/etc/passwd")
    (src / "up").symlink_to("../../..")
    (src / "loop").symlink_to("loop")
    os.mkfifo(src / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(src / "sock"))
        if os.geteuid() == 0:
            os.mknod(src / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        packed = pack(src)
    assert set(packed.dropped) >= {"fifo", "sock"}
    assert os.geteuid() != 0 or "null" in packed.dropped
    with tarfile.open(fileobj=io.BytesIO(packed.data)) as tar:
        kinds = {m.name: (m.type, m.linkname) for m in tar.getmembers()}
    assert kinds["passwd"] == (tarfile.SYMTYPE, "/etc/passwd")  # the link, never /etc/passwd's content
    assert kinds["up"] == (tarfile.SYMTYPE, "../../..")
    assert kinds["loop"] == (tarfile.SYMTYPE, "loop")
    assert set(kinds) == {"a.txt", "passwd", "up", "loop"}


def test_pack_strips_setuid_and_group_write(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"suid": b"x", "plain": b"y"})
    (src / "suid").chmod(0o6777)
    (src / "plain").chmod(0o666)
    with tarfile.open(fileobj=io.BytesIO(pack(src).data)) as tar:
        modes = {m.name: m.mode for m in tar.getmembers()}
    assert modes == {"suid": 0o755, "plain": 0o644}


def test_pack_refuses_workspaces_over_the_caps(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {f"f{i}": b"x" for i in range(20)})
    with pytest.raises(SnapshotTooLargeError, match="more than 10 entries"):
        pack(src, Caps(max_entries=10))
    big = tree(tmp_path / "big", {"a": b"x" * 600, "b": b"y" * 600})
    with pytest.raises(SnapshotTooLargeError, match="over 1000 bytes"):
        pack(big, Caps(max_bytes=1000))


def test_pack_drops_names_that_are_not_utf8(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"ok": b"1"})
    os.close(os.open(os.fsencode(src) + b"/bad\xff", os.O_CREAT | os.O_WRONLY, 0o644))
    packed = pack(src)
    assert packed.files == 1
    assert packed.dropped == ("bad\\udcff",)


HOSTILE = {
    "traversal": [(member("../evil"), b"x")],
    "deep traversal": [(member("a/../../evil"), b"x")],
    "absolute": [(member("/tmp/evil"), b"x")],
    "dot": [(member("./a"), b"x")],
    "empty part": [(member("a//b"), b"x")],
    "file under a link": [(member("out", tarfile.SYMTYPE, link="/tmp"), b""), (member("out/evil"), b"x")],
    "dir under a link": [(member("out", tarfile.SYMTYPE, link=".."), b""), (member("out/d", tarfile.DIRTYPE), b"")],
    "hard link": [(member("a"), b"x"), (member("b", tarfile.LNKTYPE, link="a"), b"")],
    "hard link to host": [(member("shadow", tarfile.LNKTYPE, link="/etc/shadow"), b"")],
    "char device": [(member("null", tarfile.CHRTYPE), b"")],
    "block device": [(member("sda", tarfile.BLKTYPE), b"")],
    "fifo": [(member("fifo", tarfile.FIFOTYPE), b"")],
    "same name twice": [(member("a"), b"x"), (member("a"), b"y")],
    "file then link of the same name": [(member("a"), b"x"), (member("a", tarfile.SYMTYPE, link="/etc"), b"")],
}


@pytest.mark.parametrize("members", list(HOSTILE.values()), ids=list(HOSTILE))
def test_unpack_refuses_hostile_snapshots_and_writes_nothing_outside(tmp_path: Path, members: list) -> None:  # type: ignore[type-arg]
    dest = tmp_path / "ws" / "dest"
    dest.mkdir(parents=True)
    with pytest.raises(SnapshotError):
        unpack(crafted(*members), dest)
    assert not (tmp_path / "ws" / "evil").exists()
    assert not (tmp_path / "evil").exists()
    assert not Path("/tmp/evil").exists()


def test_unpack_makes_setuid_entries_plain(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    unpack(crafted((member("s", mode=0o4755), b"x"), (member("w", mode=0o666), b"y")), dest)
    assert (dest / "s").stat().st_mode & 0o7777 == 0o755
    assert (dest / "w").stat().st_mode & 0o7777 == 0o644


def test_unpack_refuses_bombs_and_garbage(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    bomb = gzip.compress(crafted((member("zeros"), b"\0" * 5_000_000)))
    assert len(bomb) < 10_000
    with pytest.raises(SnapshotTooLargeError):
        unpack(bomb, dest, Caps(max_bytes=1_000_000))
    many = crafted(*[(member(f"f{i}"), b"") for i in range(50)])
    with pytest.raises(SnapshotTooLargeError):
        unpack(many, dest, Caps(max_entries=10))
    with pytest.raises(SnapshotError):
        unpack(b"not a tar at all" * 100, dest)
    with pytest.raises(SnapshotError):
        unpack(gzip.compress(b"not a tar"), dest)
    (dest / "x").write_text("x")
    with pytest.raises(SnapshotError, match="not empty"):
        unpack(crafted((member("a"), b"x")), dest)


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=4096))
def test_unpack_of_arbitrary_bytes_is_a_snapshot_error_or_a_clean_restore(tmp_path_factory: pytest.TempPathFactory,
                                                                          data: bytes) -> None:  # fmt: skip
    dest = tmp_path_factory.mktemp("dest")
    with contextlib.suppress(SnapshotError):
        unpack(data, dest)
    for path in dest.rglob("*"):
        assert path.resolve(strict=False).is_relative_to(dest.resolve()) or path.is_symlink()
