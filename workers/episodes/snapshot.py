"""Workspace snapshots: what survives an agent's step is files, nothing else.

A snapshot is a deterministic tar (sorted names, mtime 0, owner 0, no user names) of a workspace directory,
content-addressed by its sha256. Both directions treat the other side as hostile: the directory was written by
the agent's program, and a snapshot may come from anywhere (S3, a task archive).

* ``pack`` never follows a symlink (it is stored as a link, target verbatim), opens every file with
  ``O_NOFOLLOW`` relative to its parent's fd (a swapped path cannot redirect it), drops FIFOs, sockets and
  devices (listed in ``Packed.dropped``), keeps only the owner-execute bit of a mode (no setuid/setgid/sticky,
  no group/other write), and stops at the caps (``SnapshotTooLargeError``).
* ``unpack`` writes into an empty directory only: each name must be a normalised relative path, no parent of
  an entry may be a link, a name is written once, files are created ``O_EXCL|O_NOFOLLOW`` under real
  directories it made itself, links are made last; hard links, devices and anything else are refused. A
  gzipped snapshot (a task's archive) is inflated at most to the caps, never further.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import stat
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from schemas.errors import RewardstreamError

#: Longest member name (POSIX PATH_MAX is 4096; names in a workspace are far shorter).
MAX_NAME_BYTES = 1024
_READ_CHUNK = 1 << 20


class SnapshotError(RewardstreamError):
    """A snapshot could not be made or restored; the message names the entry and why."""


class SnapshotTooLargeError(SnapshotError):
    """The workspace is over its caps (bytes or entries)."""


@dataclass(frozen=True, slots=True)
class Caps:
    """Limits of one workspace (``episode.workspace_max_mb`` / ``workspace_max_files`` of the task)."""

    max_bytes: int = 64 << 20
    max_entries: int = 5000


@dataclass(frozen=True, slots=True)
class Packed:
    """A snapshot: the tar bytes, their sha256, and what was left out."""

    data: bytes
    sha256: str
    files: int
    bytes: int
    dropped: tuple[str, ...] = field(default_factory=tuple)


def _safe_mode(mode: int, *, is_dir: bool) -> int:
    """0o755/0o644 by the owner-execute bit: nothing setuid, nothing writable by others."""
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


def pack(root: Path, caps: Caps = Caps()) -> Packed:
    """Snapshot the directory ``root`` (not following anything); raise SnapshotTooLargeError over the caps."""
    buffer = io.BytesIO()
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
            packer = _Packer(tar, caps)
            packer.directory(root_fd, "")
    finally:
        os.close(root_fd)
    data = buffer.getvalue()
    return Packed(data, hashlib.sha256(data).hexdigest(), packer.entries, packer.bytes, tuple(packer.dropped))


class _Packer:
    """One walk of a workspace into a tar, counting against the caps."""

    def __init__(self, tar: tarfile.TarFile, caps: Caps) -> None:
        self.tar = tar
        self.caps = caps
        self.entries = 0
        self.bytes = 0
        self.dropped: list[str] = []

    def directory(self, dir_fd: int, prefix: str) -> None:
        for name in sorted(os.listdir(dir_fd)):
            path = f"{prefix}{name}"
            if not _plain_name(path):
                self.dropped.append(path.encode("utf-8", "backslashreplace").decode()[:200])
                continue
            st = os.lstat(name, dir_fd=dir_fd)
            if not (stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                self.dropped.append(path)  # FIFO, socket, device: nothing of it survives the step
                continue
            self.entries += 1
            if self.entries > self.caps.max_entries:
                raise SnapshotTooLargeError(f"workspace has more than {self.caps.max_entries} entries")
            if stat.S_ISLNK(st.st_mode):
                self.tar.addfile(_info(path, tarfile.SYMTYPE, mode=0o777, link=os.readlink(name, dir_fd=dir_fd)))
            elif stat.S_ISDIR(st.st_mode):
                self.tar.addfile(_info(path, tarfile.DIRTYPE, mode=0o755))
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
                try:
                    self.directory(fd, f"{path}/")
                finally:
                    os.close(fd)
            else:
                try:
                    data = _read_file(dir_fd, name, self.caps.max_bytes - self.bytes)
                except SnapshotTooLargeError:
                    raise SnapshotTooLargeError(f"workspace is over {self.caps.max_bytes} bytes") from None
                self.bytes += len(data)
                info = _info(path, tarfile.REGTYPE, size=len(data), mode=_safe_mode(st.st_mode, is_dir=False))
                self.tar.addfile(info, io.BytesIO(data))


def _plain_name(path: str) -> bool:
    """UTF-8 (it travels in JSON), printable-ish and not too long: other names are dropped, and say so."""
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return len(encoded) <= MAX_NAME_BYTES and not any(ch in path for ch in "\n\r\x00")


def _read_file(dir_fd: int, name: str, limit: int) -> bytes:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the lstat
            raise SnapshotError(f"{name} changed while it was read")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, _READ_CHUNK):
            total += len(chunk)
            if total > limit:
                raise SnapshotTooLargeError(f"workspace is over {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _checked_name(raw: str) -> PurePosixPath:
    """A member name as a normalised relative path, or SnapshotError."""
    if not raw or "\x00" in raw or len(raw.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise SnapshotError(f"bad entry name {raw[:80]!r}")
    path = PurePosixPath(raw)
    if path.is_absolute() or any(part in ("", ".", "..") for part in raw.rstrip("/").split("/")):
        raise SnapshotError(f"entry {raw[:200]!r} is not a plain relative path")
    return path


def unpack(data: bytes, dest: Path, caps: Caps = Caps()) -> int:
    """Restore a snapshot into the empty directory ``dest``; the number of entries written."""
    if any(dest.iterdir()):
        raise SnapshotError(f"{dest} is not empty")
    data = _inflated(data, caps)
    root_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            restorer = _Restorer(root_fd, caps)
            for member in _members(tar):
                restorer.entry(tar, member)
            restorer.links()
            return len(restorer.seen)
    except tarfile.TarError as exc:
        raise SnapshotError(f"not a snapshot: {exc}") from exc
    except OSError as exc:
        raise SnapshotError(f"cannot restore the snapshot: {exc}") from exc
    finally:
        os.close(root_fd)


def _inflated(data: bytes, caps: Caps) -> bytes:
    """``data`` itself, or (gzip) its content, refused once it outgrows what the caps allow a tar to hold."""
    if not data.startswith(b"\x1f\x8b"):
        return data
    limit = caps.max_bytes + (caps.max_entries + 2) * 3 * tarfile.BLOCKSIZE  # content + headers + end blocks
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise SnapshotError(f"not a snapshot: {exc}") from exc
    if len(out) > limit or inflater.unconsumed_tail:
        raise SnapshotTooLargeError(f"snapshot inflates to more than {limit} bytes")
    return out


class _Restorer:
    """One restore: every name once, nothing under a link, links last."""

    def __init__(self, root_fd: int, caps: Caps) -> None:
        self.root_fd = root_fd
        self.caps = caps
        self.seen: set[PurePosixPath] = set()
        self.pending_links: list[tuple[PurePosixPath, str]] = []
        self.link_paths: set[PurePosixPath] = set()
        self.bytes = 0

    def entry(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        if len(self.seen) >= self.caps.max_entries:
            raise SnapshotTooLargeError(f"snapshot has more than {self.caps.max_entries} entries")
        path = _checked_name(member.name)
        if path in self.seen or any(parent in self.link_paths for parent in path.parents):
            raise SnapshotError(f"entry {member.name!r} repeats a name or lies under a link")
        self.seen.add(path)
        if member.issym():
            self.pending_links.append((path, member.linkname))
            self.link_paths.add(path)
        elif member.isdir():
            _make_dirs(self.root_fd, path)
        elif member.isreg():
            self.bytes += member.size
            if self.bytes > self.caps.max_bytes:
                raise SnapshotTooLargeError(f"snapshot is over {self.caps.max_bytes} bytes")
            source = tar.extractfile(member)
            if source is None:
                raise SnapshotError(f"entry {member.name!r} has no data")
            _write_file(self.root_fd, path, source.read(), member.mode)
        else:
            raise SnapshotError(f"entry {member.name!r} is neither a file, a directory nor a symlink")

    def links(self) -> None:
        for path, target in self.pending_links:
            parent_fd = _open_parent(self.root_fd, path)
            try:
                os.symlink(target, path.name, dir_fd=parent_fd)
            finally:
                os.close(parent_fd)


def _members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    try:
        return tar.getmembers()
    except tarfile.TarError as exc:
        raise SnapshotError(f"corrupt snapshot: {exc}") from exc


def _open_parent(root_fd: int, path: PurePosixPath) -> int:
    """An fd of ``path``'s parent, walked from the root one real directory at a time (never a link)."""
    fd = os.dup(root_fd)
    for part in path.parts[:-1]:
        try:
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        finally:
            os.close(fd)
        fd = next_fd
    return fd


def _make_dirs(root_fd: int, path: PurePosixPath) -> None:
    fd = os.dup(root_fd)
    try:
        for part in path.parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    finally:
        os.close(fd)


def _write_file(root_fd: int, path: PurePosixPath, data: bytes, mode: int) -> None:
    if path.parent != PurePosixPath("."):
        _make_dirs(root_fd, path.parent)
    parent_fd = _open_parent(root_fd, path)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path.name, flags, _safe_mode(mode, is_dir=False), dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ELOOP):
                raise SnapshotError(f"entry {str(path)!r} is written twice") from exc
            raise
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, _safe_mode(mode, is_dir=False))
        finally:
            os.close(fd)
    finally:
        os.close(parent_fd)
