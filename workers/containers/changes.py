"""What a stopped container of an image task holds beyond its image, as a canonical delta (``delta``).

How: ``docker diff`` names the paths added, changed and deleted; each added subtree's top and each changed
file or link is fetched with ``get_archive`` (the daemon reads the container's files; nothing in the container
runs), every member is checked and re-packed by the host. The container is stopped first, so nothing changes
while it is read.

What is left out, and why: directories of the image keep the image's own mode, owner and mtime (docker lists a
directory as changed whenever something in it changed; its metadata is not worth an archive of the whole
tree); FIFOs, sockets, devices, names that are not plain UTF-8 and whiteout-like names (``.wh.*``, which an
archive extraction may treat as deletions) are dropped and named; hard links become copies. The mounts docker
makes in every container (``/proc``, ``/etc/hosts``, the init binary...) are not the agent's.
"""

from __future__ import annotations

import posixpath
import tarfile
from dataclasses import dataclass
from typing import IO

from schemas.caps import QUOTE_CHARS
from workers.containers.delta import (
    Delta,
    DeltaCaps,
    DeltaError,
    DeltaTooLargeError,
    Entry,
    Kind,
    checked_path,
    pack_delta,
    topmost,
)
from workers.containers.image_containers import GO_DIR, ContainerRun

#: Paths docker mounts or makes in every container (with ``init``): never part of a delta.
NOT_THE_AGENTS = ("/proc", "/sys", "/dev", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/.dockerenv",
                  "/usr/sbin/docker-init")  # fmt: skip
_ADDED, _DELETED = 1, 2
_WHITEOUT = ".wh."
MAX_DROPPED = 100
#: Bytes of the paths a delta deletes (topmost only): they are restored by ``rm`` command lines (ARG_MAX: 2 MiB).
MAX_DELETED_BYTES = 1 << 20
#: Bytes of the daemon's listing of changes read per entry of the caps (a path and its JSON), and beyond them.
_LISTED_BYTES_PER_ENTRY = 512
_LISTING_SLACK = 1 << 20


@dataclass(frozen=True, slots=True)
class Plan:
    """What to read of a container: whole subtrees (added), single entries (changed, not directories of the
    image), and the paths deleted."""

    subtrees: tuple[str, ...]
    singles: tuple[str, ...]
    deleted: tuple[str, ...]


def plan(diff: list[dict[str, object]]) -> Plan:
    """The reads that cover ``docker diff``'s list: an added path inside an added one comes with it, and a
    changed path with changes below it is a directory of the image (its own metadata is not kept)."""
    listed = {c.get("Path"): c.get("Kind") for c in diff}
    parents = {posixpath.dirname(p) for p in listed if isinstance(p, str)}
    kinds = {p: k for p, k in listed.items() if isinstance(p, str) and isinstance(k, int) and not _docker_s(p)}
    subtrees: list[str] = []
    singles: list[str] = []
    for path in sorted(kinds, key=lambda p: p.split("/")):
        kind = kinds[path]
        if kind == _DELETED or (subtrees and path.startswith(subtrees[-1] + "/")):
            continue
        if kind == _ADDED:
            subtrees.append(path)
        elif path not in parents:
            singles.append(path)
    deleted = tuple(p for p, k in kinds.items() if k == _DELETED)
    return Plan(tuple(subtrees), tuple(singles), deleted)


def _docker_s(path: str) -> bool:
    return any(path == top or path.startswith(top + "/") for top in NOT_THE_AGENTS)


def read_changes(run: ContainerRun, caps: DeltaCaps) -> Delta:
    """The delta of ``run``'s (stopped) container. DeltaTooLargeError past ``caps``; ContainerInfraError when
    the daemon fails."""
    listing = run.changes(caps.max_entries * _LISTED_BYTES_PER_ENTRY + _LISTING_SLACK)
    if listing is None:
        raise DeltaTooLargeError(f"over {caps.max_entries} changed paths (the daemon's listing is too long to read)")
    reads = plan(listing)
    reader = _Reader(caps)
    for path in reads.singles:
        stat = run.stat(path)
        if stat is not None and not int(stat.get("mode", 0)) & GO_DIR:
            with run.get(path) as stream:
                reader.read(stream, posixpath.dirname(path))
    for path in reads.subtrees:
        with run.get(path) as stream:
            reader.read(stream, posixpath.dirname(path))
    if sum(len(p.encode()) + 1 for p in topmost(reads.deleted)) > MAX_DELETED_BYTES:
        raise DeltaTooLargeError(f"over {MAX_DELETED_BYTES} bytes of deleted paths (delete their directory instead)")
    delta = pack_delta(reader.entries, reads.deleted, caps)
    return Delta(delta.data, delta.sha256, delta.entries, delta.deleted, tuple(reader.dropped[:MAX_DROPPED]))


class _Reader:
    """Entries of the daemon's archives, checked, within the caps as they come."""

    def __init__(self, caps: DeltaCaps) -> None:
        self.caps = caps
        self.entries: list[Entry] = []
        self.dropped: list[str] = []
        self.size = 0

    def read(self, stream: IO[bytes], parent: str) -> None:
        files: dict[str, bytes] = {}  # this archive's regular files by member name: hard links' sources
        with tarfile.open(fileobj=stream, mode="r|", encoding="utf-8", errors="surrogateescape") as tar:
            for member in tar:
                path = posixpath.normpath(posixpath.join(parent, member.name))
                if not self._plain(path):
                    continue
                data = b""
                if member.isreg():
                    data = self._data(tar, member)
                    files[member.name] = data
                elif member.islnk() and member.linkname in files:
                    data = files[member.linkname]
                    self._count(len(data))
                elif not (member.isdir() or member.issym()):
                    self.dropped.append(path)
                    continue
                kind: Kind = "dir" if member.isdir() else "symlink" if member.issym() else "file"
                target = member.linkname if member.issym() else ""
                self.entries.append(
                    Entry(path, kind, member.mode, member.uid, member.gid, int(member.mtime), data=data, target=target)
                )
                if len(self.entries) > self.caps.max_entries:
                    raise DeltaTooLargeError(f"over {self.caps.max_entries} changed paths")

    def _plain(self, path: str) -> bool:
        if any(path.startswith(gone + "/") for gone in self.dropped[-1:]):
            return False  # inside a directory left out (members come in path order)
        try:
            checked_path(path)
        except DeltaError:
            self.dropped.append(path.encode("utf-8", "replace").decode("utf-8")[:QUOTE_CHARS])
            return False
        if posixpath.basename(path).startswith(_WHITEOUT) or _docker_s(path):
            self.dropped.append(path)
            return False
        return True

    def _data(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
        self._count(member.size)
        source = tar.extractfile(member)
        return source.read() if source is not None else b""

    def _count(self, size: int) -> None:
        self.size += size
        if self.size > self.caps.max_bytes:
            raise DeltaTooLargeError(f"over {self.caps.max_bytes} bytes of changed files")
