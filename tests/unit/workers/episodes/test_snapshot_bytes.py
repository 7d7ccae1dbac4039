"""``snapshot.pack`` writes byte for byte the tar it wrote over stdlib ``tarfile`` (commit 4b7128a).

Why it matters: a snapshot is content-addressed (its sha256 is its S3 key and is kept in the episode's state),
so a tar that changed by one byte would be a different snapshot and break the resume of existing episodes.
``reference_pack`` is the old implementation, copied as it was (only its bytes are compared); ``PINNED`` are
digests 4b7128a's code computed for ``varied_tree``, which hold even if a later ``tarfile`` changed.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from workers.episodes.snapshot import Caps, pack

# --------------------------------------------------------------------------------------------------------
# The old writer (workers/episodes/snapshot.py at 4b7128a), as it was


def _safe_mode(mode: int, *, is_dir: bool) -> int:
    return 0o755 if is_dir or mode & stat.S_IXUSR else 0o644


def _info(name: str, kind: bytes, *, size: int = 0, mode: int = 0o644, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.linkname = link
    return info


def _plain_name(path: str) -> bool:
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return len(encoded) <= 1024 and not any(ch in path for ch in "\n\r\x00")


def _read_file(dir_fd: int, name: str) -> bytes:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def reference_pack(root: Path) -> bytes:
    """The tar 4b7128a's ``snapshot.pack`` made of ``root`` (its walk and its ``tarfile`` calls; no caps)."""
    buffer = io.BytesIO()
    root_fd = os.open(root, _DIR_FLAGS)
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        stack: list[tuple[int, str, list[str]]] = [(root_fd, "", sorted(os.listdir(root_fd), reverse=True))]
        while stack:
            dir_fd, prefix, names = stack[-1]
            if not names:
                stack.pop()
                os.close(dir_fd)
                continue
            name = names.pop()
            path = f"{prefix}{name}"
            if not _plain_name(path):
                continue
            st = os.lstat(name, dir_fd=dir_fd)
            if stat.S_ISLNK(st.st_mode):
                tar.addfile(_info(path, tarfile.SYMTYPE, mode=0o777, link=os.readlink(name, dir_fd=dir_fd)))
            elif stat.S_ISDIR(st.st_mode):
                tar.addfile(_info(path, tarfile.DIRTYPE, mode=0o755))
                opened = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                stack.append((opened, f"{path}/", sorted(os.listdir(opened), reverse=True)))
            elif stat.S_ISREG(st.st_mode):
                data = _read_file(dir_fd, name)
                info = _info(path, tarfile.REGTYPE, size=len(data), mode=_safe_mode(st.st_mode, is_dir=False))
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# --------------------------------------------------------------------------------------------------------
# Trees


def varied_tree(root: Path) -> Path:
    """Every shape a header can take: names and links at and around the 100-byte ustar field (a directory's
    trailing ``/`` counted), non-ASCII and non-UTF-8 values (``hdrcharset=BINARY``), names up to the
    1024-byte cap, sizes around the 512-byte block and the 10240-byte record, modes, dropped entries."""
    root.mkdir()
    raw = os.fsencode(root)

    def file(name: str | bytes, data: bytes = b"x", mode: int = 0o644) -> None:
        path = raw + b"/" + (name if isinstance(name, bytes) else name.encode())
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(data)
        os.chmod(path, mode)

    def link(name: str, target: bytes) -> None:
        os.symlink(target, raw + b"/" + name.encode())

    for size in (0, 1, 511, 512, 513, 9215, 9216, 10240, 20000):
        file(f"sizes/s{size}", bytes(range(256)) * (size // 256) + b"z" * (size % 256))
    for n in (98, 99, 100, 101, 150):
        file("f" * n, str(n).encode())
        (root / ("d" * n)).mkdir()
        file(f"e/{'g' * n}")
        link(f"l{n}", b"t" * n)
    file("modes/exec", b"#!/bin/sh\n", 0o755)
    file("modes/suid", b"s", 0o6777)
    file("modes/group-write", b"w", 0o666)
    file("modes/owner-exec-only", b"o", 0o700)
    file("naïve/名前.txt", "ü".encode())
    file("ascii/" + "ß" * 60, b"two bytes a char: 120 bytes, 60 characters")
    file("deep/" + "/".join(["segment"] * 120)[:1010], b"near the name cap")
    file("over/" + "/".join(["segment"] * 150), b"dropped: its path is over the cap")
    file("bad\nname", b"dropped: a newline")
    file(b"bad\xffname", b"dropped: not UTF-8")
    os.mkfifo(root / "fifo")
    (root / "empty").mkdir()
    link("abs", b"/etc/passwd")
    link("up", b"../../..")
    link("dangling", b"nowhere")
    link("odd", b"bad\xfftarget")
    link("nonascii", "ziel-ß".encode())
    link("long-odd", b"x/" * 100 + b"\xfe")
    link("ünï-odd", b"\xff")
    link("ünï-" + "q" * 120, "ß".encode() * 80)
    return root


def test_a_varied_tree_packs_to_the_bytes_tarfile_made(tmp_path: Path) -> None:
    root = varied_tree(tmp_path / "src")
    packed = pack(root, Caps(max_bytes=1 << 20, max_entries=500))
    assert packed.data == reference_pack(root)
    assert packed.sha256 == PINNED_VARIED
    assert {"fifo", "bad\nname", "bad\\udcffname"} <= set(packed.dropped)


def test_an_empty_workspace_and_a_single_file_pack_as_before(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert pack(empty).data == reference_pack(empty) == bytes(10240)
    one = tmp_path / "one"
    one.mkdir()
    (one / "a.txt").write_bytes(b"a\n")
    assert pack(one).sha256 == hashlib.sha256(reference_pack(one)).hexdigest() == PINNED_ONE


#: sha256 of the tars 4b7128a's ``snapshot.pack`` made (``varied_tree``; a workspace of one ``a.txt``).
PINNED_VARIED = "d26fa94cdeb2f261617c4a58dfb16388f9096226ce22a31e688bbcfdd3d33e8d"
PINNED_ONE = "8fe0f1cac9fd91ef9f93874c4e335cc128c6fa524d9031bc2c6e21c614cb7e1c"

_NAME = st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=["Cs"]), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(
    files=st.dictionaries(
        st.lists(_NAME.filter(lambda s: s not in (".", "..")), min_size=1, max_size=4).map("/".join),
        st.tuples(st.binary(max_size=1100), st.booleans()),
        max_size=8,
    ),
    links=st.dictionaries(_NAME.filter(lambda s: s not in (".", "..")), st.binary(min_size=1, max_size=160),
                          max_size=4),
)  # fmt: skip
def test_any_tree_packs_to_the_bytes_tarfile_made(files: dict[str, tuple[bytes, bool]],
                                                  links: dict[str, bytes]) -> None:  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "src"
        root.mkdir()
        for name, (data, executable) in files.items():
            path = root / name
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            except OSError:
                continue  # a name that is another's directory, or too long for the filesystem
            path.chmod(0o755 if executable else 0o644)
        for name, target in links.items():
            try:
                os.symlink(target.replace(b"\0", b"0"), os.fsencode(root / f"link-{name}"))
            except OSError:
                continue
        assert pack(root, Caps(max_bytes=1 << 20, max_entries=500)).data == reference_pack(root)
