"""Workspace snapshots: what survives an agent's step is files, nothing else.

A snapshot is a deterministic tar (sorted names, mtime 0, owner 0, no user names) of a workspace directory,
content-addressed by its sha256. Its bytes are written by the guest's ``workspace_tar``, the one writer of the
format (the step runner packs with it inside the sandbox), byte for byte what ``tarfile`` wrote here before.
It is read with ``tarfile``: a task's archive is any tar its author's tools made (GNU long names, pax global
headers), not only this writer's subset. Both directions treat the other side as hostile: the directory was
written by the agent's program, and a snapshot may come from anywhere (S3, a task archive).

* ``pack`` never follows a symlink (it is stored as a link, target verbatim), opens every file with
  ``O_NOFOLLOW`` relative to its parent's fd (a swapped path cannot redirect it), drops FIFOs, sockets and
  devices (listed in ``Packed.dropped``), keeps only the owner-execute bit of a mode (no setuid/setgid/sticky,
  no group/other write), and stops at the caps (``SnapshotTooLargeError``).
* ``unpack`` writes into an empty directory only: each name must be a normalised relative path, no parent of
  an entry may be a link, a name is written once, files are created ``O_EXCL|O_NOFOLLOW`` under real
  directories it made itself (in path order, each through its parent's fd), links are made last; hard
  links, devices and anything else are refused. A gzipped snapshot (a task's archive) is inflated at most to
  the caps, never further.
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
from pathlib import Path

from guest import workspace_paths
from guest.workspace_tar import tar_end, tar_entry
from schemas.caps import QUOTE_CHARS
from schemas.errors import RewardstreamError

#: Characters of a bad entry name an error quotes (it may be all slashes or control characters).
_NAME_SHOWN_CHARS = 80

#: Longest member name: the guest's, so the step runner and the host keep and refuse the same names.
MAX_NAME_BYTES = workspace_paths.MAX_NAME_BYTES
_READ_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOT_PLAIN = frozenset(("", ".", ".."))


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


def pack(root: Path, caps: Caps = Caps()) -> Packed:
    """Snapshot the directory ``root`` (not following anything); raise SnapshotTooLargeError over the caps."""
    packer = _Packer(caps)
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        packer.walk(root_fd)
    finally:
        os.close(root_fd)
    packer.add(tar_end(packer.size))
    data = b"".join(packer.chunks)
    return Packed(data, hashlib.sha256(data).hexdigest(), packer.entries, packer.bytes, tuple(packer.dropped))


class _Packer:
    """One walk of a workspace into a tar (its members' bytes in ``chunks``), counting against the caps."""

    def __init__(self, caps: Caps) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.caps = caps
        self.entries = 0
        self.bytes = 0
        self.dropped: list[str] = []

    def add(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)

    def walk(self, root_fd: int) -> None:
        """Depth first, names sorted in each directory, with no recursion: the open directories of the
        current path wait on a stack with their listings, and every call names one entry of its parent's fd
        (an entry costs the same at any depth)."""
        stack: list[tuple[int, str, list[str]]] = [(root_fd, "", sorted(os.listdir(root_fd), reverse=True))]
        try:
            while stack:
                dir_fd, prefix, names = stack[-1]
                if not names:
                    stack.pop()
                    if stack:  # the root's fd is the caller's
                        os.close(dir_fd)
                    continue
                name = names.pop()
                opened = self.entry(dir_fd, name, f"{prefix}{name}")
                if opened is not None:
                    stack.append((opened, f"{prefix}{name}/", []))
                    stack[-1][2].extend(sorted(os.listdir(opened), reverse=True))
        finally:
            for dir_fd, _, _ in stack[1:]:
                os.close(dir_fd)

    def entry(self, dir_fd: int, name: str, path: str) -> int | None:
        """Add the entry ``name`` of ``dir_fd`` (``path`` in the workspace); a directory's fd when it is one."""
        if not workspace_paths.plain_name(path):  # a name under it would be longer still: nothing under it is walked
            self.dropped.append(path.encode("utf-8", "backslashreplace").decode()[:QUOTE_CHARS])
            return None
        st = os.lstat(name, dir_fd=dir_fd)
        if not (stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            self.dropped.append(path)  # FIFO, socket, device: nothing of it survives the step
            return None
        self.entries += 1
        if self.entries > self.caps.max_entries:
            raise SnapshotTooLargeError(f"workspace has more than {self.caps.max_entries} entries")
        encoded = path.encode("utf-8")  # plain_name made sure it is UTF-8
        if stat.S_ISLNK(st.st_mode):  # the target's bytes verbatim (it need not be UTF-8)
            self.add(tar_entry(encoded, b"2", mode=0o777, link=os.readlink(os.fsencode(name), dir_fd=dir_fd)))
        elif stat.S_ISDIR(st.st_mode):
            self.add(tar_entry(encoded + b"/", b"5", mode=0o755))
            return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        else:
            try:
                data = _read_file(dir_fd, name, self.caps.max_bytes - self.bytes)
            except SnapshotTooLargeError:
                raise SnapshotTooLargeError(f"workspace is over {self.caps.max_bytes} bytes") from None
            self.bytes += len(data)
            self.add(tar_entry(encoded, b"0", data, _safe_mode(st.st_mode, is_dir=False)))
        return None


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


def _checked_name(raw: str) -> str:
    """A member name as a normalised relative path (a directory's trailing ``/`` gone), or SnapshotError."""
    if not raw or "\x00" in raw or len(raw.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise SnapshotError(f"bad entry name {raw[:_NAME_SHOWN_CHARS]!r}")
    name = raw.rstrip("/")
    if raw.startswith("/") or _NOT_PLAIN.intersection(name.split("/")):
        raise SnapshotError(f"entry {raw[:QUOTE_CHARS]!r} is not a plain relative path")
    return name


def unpack(data: bytes, dest: Path, caps: Caps = Caps()) -> int:
    """Restore a snapshot into the empty directory ``dest``; the number of entries written. Entries are
    written in path order (a canonical snapshot's own: parents first, everything under a name right after
    it), each through its parent's fd: linear in the snapshot however deep its tree."""
    if any(dest.iterdir()):
        raise SnapshotError(f"{dest} is not empty")
    data = _inflated(data, caps)
    root_fd = os.open(dest, _DIR_FLAGS)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            members = _members(tar)
            if len(members) > caps.max_entries:
                raise SnapshotTooLargeError(f"snapshot has more than {caps.max_entries} entries")
            named = sorted(((_checked_name(m.name), m) for m in members), key=lambda e: e[0].split("/"))
            restorer = _Restorer(root_fd, caps)
            try:
                for name, member in named:
                    restorer.entry(tar, name, member)
                restorer.links()
            finally:
                restorer.close()
            return len(restorer.seen)
    except tarfile.TarError as exc:
        raise SnapshotError(f"not a snapshot: {exc}") from exc
    except OSError as exc:
        raise SnapshotError(f"cannot restore the snapshot: {exc}") from exc
    finally:
        os.close(root_fd)


def tar_limit(caps: Caps) -> int:
    """The most bytes a tar within ``caps`` can take: its content, each entry's headers, the end blocks."""
    return caps.max_bytes + (caps.max_entries + 2) * 3 * tarfile.BLOCKSIZE


def _inflated(data: bytes, caps: Caps) -> bytes:
    """``data`` itself, or (gzip) its content, refused once it outgrows what the caps allow a tar to hold."""
    if not data.startswith(b"\x1f\x8b"):
        return data
    limit = tar_limit(caps)
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise SnapshotError(f"not a snapshot: {exc}") from exc
    if len(out) > limit or inflater.unconsumed_tail:
        raise SnapshotTooLargeError(f"snapshot inflates to more than {limit} bytes")
    return out


class _Restorer:
    """One restore, entries in path order: every name once, nothing under a link or a file, links last.

    The open directories of the last entry's parent wait on a stack (the root's fd is the caller's): the next
    entry closes what is not its parent's and opens (making) what is missing, one name at a time, so in path
    order each directory is opened once."""

    def __init__(self, root_fd: int, caps: Caps) -> None:
        self.stack: list[tuple[str, int]] = [("", root_fd)]
        self.caps = caps
        self.seen: set[str] = set()
        self.under = "\x00"  # the last file or link + "/": what lies under it comes right after it
        self.pending_links: list[tuple[str, str, str]] = []
        self.bytes = 0

    def entry(self, tar: tarfile.TarFile, name: str, member: tarfile.TarInfo) -> None:
        if name in self.seen or name.startswith(self.under):
            raise SnapshotError(f"entry {member.name[:QUOTE_CHARS]!r} repeats a name or lies under a link or a file")
        self.seen.add(name)
        parent, _, base = name.rpartition("/")
        if member.isdir():
            self.directory(name)
            return
        self.under = f"{name}/"
        if member.issym():
            self.pending_links.append((parent, base, member.linkname))
        elif member.isreg():
            self.bytes += member.size
            if self.bytes > self.caps.max_bytes:
                raise SnapshotTooLargeError(f"snapshot is over {self.caps.max_bytes} bytes")
            source = tar.extractfile(member)
            if source is None:
                raise SnapshotError(f"entry {member.name!r} has no data")
            _write_file(self.directory(parent), base, name, source.read(), member.mode)
        else:
            raise SnapshotError(f"entry {member.name!r} is neither a file, a directory nor a symlink")

    def directory(self, path: str) -> int:
        """An fd of the directory ``path`` (``""``: the root), made when it is not there."""
        while self.stack[-1][0] and path != self.stack[-1][0] and not path.startswith(f"{self.stack[-1][0]}/"):
            os.close(self.stack.pop()[1])
        here = self.stack[-1][0]
        if path != here:
            for part in (path[len(here) + 1 :] if here else path).split("/"):
                top, fd = self.stack[-1]
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                opened = os.open(part, _DIR_FLAGS, dir_fd=fd)
                self.stack.append((f"{top}/{part}" if top else part, opened))
        return self.stack[-1][1]

    def links(self) -> None:
        for parent, base, target in self.pending_links:
            os.symlink(target, base, dir_fd=self.directory(parent))

    def close(self) -> None:
        for _, fd in self.stack[1:]:
            os.close(fd)
        del self.stack[1:]


def _members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    try:
        return tar.getmembers()
    except tarfile.TarError as exc:
        raise SnapshotError(f"corrupt snapshot: {exc}") from exc


def _write_file(dir_fd: int, base: str, name: str, data: bytes, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(base, flags, _safe_mode(mode, is_dir=False), dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ELOOP):
            raise SnapshotError(f"entry {name!r} is written twice") from exc
        raise
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, _safe_mode(mode, is_dir=False))
    finally:
        os.close(fd)
