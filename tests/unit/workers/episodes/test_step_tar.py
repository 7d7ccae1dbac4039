"""The runner's tar subset against tarfile and the snapshot module, and its path checks."""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guest import step_errors, workspace_paths, workspace_snapshot, workspace_tar
from tests.unit.workers.episodes.step_parts import CAPS, make_tree, runner_pack
from workers.episodes.snapshot import Caps, pack, unpack


def listing(root: Path) -> dict[str, tuple[str, bytes]]:
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("l", os.readlink(os.fsencode(path)))
            elif path.is_dir():
                out[rel] = ("d", b"")
            else:
                out[rel] = ("f" if not os.access(path, os.X_OK) else "x", path.read_bytes())
    return out


def runner_restore(data: bytes, root: Path) -> int:
    root.mkdir(parents=True)
    old = os.getcwd()
    os.chdir(root)
    try:
        return workspace_snapshot.restore(data)
    finally:
        os.chdir(old)


# --------------------------------------------------------------------------------------------------------
# The runner's tar subset against tarfile and the snapshot module


def test_runner_tar_and_snapshot_tar_read_each_other(tmp_path: Path) -> None:
    files = {
        "a.txt": b"a\n",
        "d" * 99 + "/" + "e" * 99 + "/" + "f" * 150: b"long\n",
        "naïve/名前.txt": "ü".encode(),
        "run.sh": b"#!/bin/sh\n",
        "empty/.keep": b"",
    }
    links = {"near": b"a.txt", "far": b"x/" * 200 + b"y", "odd": b"bad\xffname", "abs": b"/etc/passwd"}
    src = make_tree(tmp_path / "src", files, links)
    (src / "run.sh").chmod(0o755)
    (src / "emptydir").mkdir()
    canonical = pack(src, CAPS)
    # the runner restores what snapshot.pack made...
    assert runner_restore(canonical.data, tmp_path / "restored") == len(listing(src))
    assert listing(tmp_path / "restored") == listing(src)
    # ... and snapshot.unpack restores what the runner made, to the same canonical bytes
    tar, packer = runner_pack(src)
    dest = tmp_path / "dest"
    dest.mkdir()
    unpack(tar, dest, CAPS)
    assert listing(dest) == listing(src)
    assert pack(dest, CAPS).data == canonical.data
    assert (packer.entries, packer.bytes) == (len(listing(src)), sum(len(v) for v in files.values()))
    # tarfile reads the runner's tar member for member
    with tarfile.open(fileobj=io.BytesIO(tar)) as opened:
        names = {m.name: m for m in opened.getmembers()}
    assert names["far"].linkname == "x/" * 200 + "y"
    assert names["run.sh"].mode == 0o755
    assert names["a.txt"].mode == 0o644


@given(
    st.dictionaries(
        st.lists(st.text(st.characters(blacklist_characters="/\x00\n\r", blacklist_categories=["Cs"]), min_size=1,
                         max_size=40).filter(lambda s: s not in (".", "..")), min_size=1, max_size=3).map("/".join),
        st.binary(max_size=600),
        max_size=8,
    ),
    st.booleans(),
)  # fmt: skip
def test_runner_pack_round_trips_any_tree(files: dict[str, bytes], executable: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "src"
        root.mkdir()
        for name, data in files.items():
            path = root / name
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            except (NotADirectoryError, FileExistsError, IsADirectoryError, OSError):
                continue  # a name that is another's directory: the tree just has one of them
            if executable:
                path.chmod(0o755)
        tar, _ = runner_pack(root)
        dest = Path(tmp) / "dest"
        dest.mkdir()
        unpack(tar, dest, CAPS)
        assert listing(dest) == listing(root)
        back = Path(tmp) / "back"
        runner_restore(pack(dest, CAPS).data, back)
        assert listing(back) == listing(root)


def test_runner_pack_drops_what_is_not_a_file_and_keeps_only_the_exec_bit(tmp_path: Path) -> None:
    import socket

    src = make_tree(tmp_path / "src", {"keep": b"k", "suid": b"s"}, {})
    os.mkfifo(src / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "sock"))
    (src / "suid").chmod(0o6777)
    (src / "bad\nname").write_bytes(b"x")
    (src / "hidden").write_bytes(b"h")
    (src / "hidden").chmod(0)
    try:
        tar, packer = runner_pack(src)
    finally:
        sock.close()
    assert sorted(packer.dropped) == ["bad\nname", "fifo", "sock"]
    with tarfile.open(fileobj=io.BytesIO(tar)) as opened:
        modes = {m.name: m.mode for m in opened.getmembers()}
    assert modes == {"hidden": 0o644, "keep": 0o644, "suid": 0o755}


def test_runner_pack_stops_at_the_caps(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "big", {"a": bytes(600), "b": bytes(600)}, {})
    with pytest.raises(step_errors.WorkspaceError, match="byte cap"):
        runner_pack(src, Caps(max_bytes=1000, max_entries=10))
    many = make_tree(tmp_path / "many", {f"f{i}": b"" for i in range(11)}, {})
    with pytest.raises(step_errors.WorkspaceError, match="more than 10 entries"):
        runner_pack(many, Caps(max_bytes=1000, max_entries=10))
    # the frame's byte budget holds even where the caps would not stop it
    packer = workspace_snapshot.Packer(1 << 20, 100, 4 * workspace_tar.BLOCK)
    old = os.getcwd()
    os.chdir(src)
    try:
        with pytest.raises(step_errors.WorkspaceError, match="tar is over"):
            packer.pack()
    finally:
        os.chdir(old)


def crafted(*entries: tuple[str, bytes, bytes, str]) -> bytes:
    """A tar by tarfile: (name, kind, data, link) entries."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data, link in entries:
            info = tarfile.TarInfo(name)
            info.type, info.size, info.linkname = kind, len(data), link
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (crafted(("../x", tarfile.REGTYPE, b"x", "")), "plain relative path"),
        (crafted(("/abs", tarfile.REGTYPE, b"x", "")), "plain relative path"),
        (crafted(("l", tarfile.SYMTYPE, b"", "/tmp"), ("l/x", tarfile.REGTYPE, b"x", "")), "non-directory"),
        (crafted(("f", tarfile.REGTYPE, b"x", ""), ("f/x", tarfile.REGTYPE, b"x", "")), "non-directory"),
        (crafted(("a", tarfile.REGTYPE, b"1", ""), ("a", tarfile.REGTYPE, b"2", "")), "repeats"),
        (crafted(("h", tarfile.LNKTYPE, b"", "/etc/passwd")), "not a file"),
        (crafted(("c", tarfile.CHRTYPE, b"", "")), "not a file"),
        (b"\x01" * 1024, "corrupt"),
    ],
    ids=["traversal", "absolute", "under-link", "under-file", "twice", "hardlink", "device", "garbage"],
)
def test_runner_restore_refuses_what_snapshots_never_hold(tmp_path: Path, data: bytes, why: str) -> None:
    with pytest.raises(step_errors.JobError, match=why):
        runner_restore(data, tmp_path / "w")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("../x", "'..'"),
        ("a/../../x", "'..'"),
        ("a//b", "normalised"),
        ("./a", "normalised"),
        ("a/", "normalised"),
        ("a\nb", "plain"),
        ("x" * 1025, "plain"),
        (["a"], "empty"),
    ],
)
def test_check_path_refuses_paths_that_are_not_plain_and_relative(path: object, why: str) -> None:
    with pytest.raises(step_errors.StepError, match=why):
        workspace_paths.check_path(path)


def test_check_path_accepts_plain_paths() -> None:
    assert workspace_paths.check_path("src/pkg/mod.py") == ["src", "pkg", "mod.py"]
    assert workspace_paths.check_path(".hidden/..dots") == [".hidden", "..dots"]


NAMES = st.text(st.characters(blacklist_characters="/\x00\n\r", blacklist_categories=["Cs"]), min_size=1, max_size=60)


@given(
    st.dictionaries(st.lists(NAMES, min_size=1, max_size=3).map("/".join), st.binary(max_size=700), max_size=6),
    st.dictionaries(NAMES, st.binary(min_size=1, max_size=300).filter(lambda b: b"\x00" not in b), max_size=3),
    st.sets(NAMES, max_size=3),
)
def test_the_runner_tar_is_byte_for_byte_the_snapshot_tar(
    files: dict[str, bytes], links: dict[str, bytes], executables: set[str]
) -> None:
    """Long, non-ASCII and non-UTF-8 names and targets, exec bits, empty dirs: the same bytes as
    ``snapshot.pack`` (so an unchanged workspace is recognised in the sandbox)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "w"
        root.mkdir()
        for name, data in files.items():
            with contextlib.suppress(OSError):  # a name that is another's directory or file: one of them
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_bytes(data)
        for name, target in links.items():
            with contextlib.suppress(OSError):
                os.symlink(target, os.fsencode(root / name))
        for name in executables:
            with contextlib.suppress(OSError):
                (root / name).mkdir()
                (root / name / "x").write_bytes(b"#!/bin/sh\n")
                (root / name / "x").chmod(0o755)
        tar, _ = runner_pack(root)
        assert tar == pack(root, CAPS).data
