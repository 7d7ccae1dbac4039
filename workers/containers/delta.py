"""An image task episode's state: the delta of its container's filesystem against the task image.

Why a delta: an agent in a Harbor task may change anything in its container (``pip install``, ``/etc``), and the
next step, on any worker, must see it; the image is on every worker already, so only what changed travels.

The format is one canonical tar, content-addressed by its sha256 like a workspace snapshot: first a file
``deleted`` (a JSON list of the absolute paths removed from the image, topmost only), then ``root/<path>`` for
every directory, regular file and symlink added or changed, in path order, each with its mode (permission and
sticky bits), numeric owner and mtime (``make`` decides by mtimes), no user names, no hard links, devices,
FIFOs or sockets. ``read_delta`` accepts only those exact bytes (``pack_delta(read_delta(d)) == d``), so a
delta has one spelling and its sha256 names one state. Everything in it was written by the agent: names are
checked on both sides and nothing is ever written to the host's disk.
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from schemas.caps import QUOTE_CHARS
from schemas.errors import RewardstreamError

DELETED = "deleted"
ROOT = "root"
#: Longest absolute path kept (PATH_MAX); a component is at most NAME_MAX bytes.
MAX_PATH_BYTES = 4096
_MAX_COMPONENT_BYTES = 255
_MODE_BITS = 0o1777
_MAX_ID = (1 << 32) - 2
_MAX_MTIME = (1 << 33) - 1
_DELETED_LIST_BYTES = 8 << 20

Kind = Literal["dir", "file", "symlink"]


class DeltaError(RewardstreamError):
    """A delta could not be made or read; the message names the entry and why."""


class DeltaTooLargeError(DeltaError):
    """The container's changes are over the delta's caps (bytes or entries)."""


@dataclass(frozen=True, slots=True)
class DeltaCaps:
    """Limits of one episode's delta: bytes of file data and entries (deletions count as entries)."""

    max_bytes: int = 128 << 20
    max_entries: int = 20_000


@dataclass(frozen=True, slots=True)
class Entry:
    """One path the container has that the image has not (or has otherwise): absolute, normalised."""

    path: str
    kind: Kind
    mode: int = 0o755
    uid: int = 0
    gid: int = 0
    mtime: int = 0
    data: bytes = b""
    target: str = ""


@dataclass(frozen=True, slots=True)
class Delta:
    """A delta's canonical bytes, their sha256, and what it holds."""

    data: bytes
    sha256: str
    entries: tuple[Entry, ...]
    deleted: tuple[str, ...]
    dropped: tuple[str, ...] = field(default_factory=tuple)

    @property
    def bytes(self) -> int:
        return sum(len(e.data) for e in self.entries)


def checked_path(path: str) -> str:
    """``path`` if it is absolute, normalised, plain UTF-8 within PATH_MAX/NAME_MAX and not ``/``; else DeltaError."""
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        raise DeltaError(f"path is not UTF-8: {path[:QUOTE_CHARS]!r}") from None
    if len(encoded) > MAX_PATH_BYTES or any(ch in path for ch in "\n\r\x00"):
        raise DeltaError(f"path is too long or holds a newline or NUL: {path[:QUOTE_CHARS]!r}")
    if path == "/" or not path.startswith("/") or posixpath.normpath(path) != path or path.startswith("//"):
        raise DeltaError(f"path is not absolute and normalised: {path[:QUOTE_CHARS]!r}")
    if any(len(part.encode("utf-8")) > _MAX_COMPONENT_BYTES for part in path.split("/")):
        raise DeltaError(f"a name in the path is over {_MAX_COMPONENT_BYTES} bytes: {path[:QUOTE_CHARS]!r}")
    return path


def path_key(path: str) -> list[str]:
    """Sort key putting every directory right before what it holds."""
    return path.split("/")


def topmost(paths: Iterable[str]) -> list[str]:
    """``paths`` sorted, without those inside another of them."""
    out: list[str] = []
    for path in sorted(set(paths), key=path_key):
        if not any(path.startswith(kept + "/") for kept in out[-1:]):
            out.append(path)
    return out


def _check(entries: list[Entry], deleted: list[str], caps: DeltaCaps) -> None:
    """The rules every delta obeys, whoever made it."""
    if len(entries) + len(deleted) > caps.max_entries:
        raise DeltaTooLargeError(f"{len(entries)} changed and {len(deleted)} deleted paths: over {caps.max_entries}")
    if (size := sum(len(e.data) for e in entries)) > caps.max_bytes:
        raise DeltaTooLargeError(f"{size} bytes of changed files: over {caps.max_bytes}")
    kinds: dict[str, Kind] = {}
    for entry in entries:
        checked_path(entry.path)
        if entry.path in kinds:
            raise DeltaError(f"{entry.path} is in the delta twice")
        parent = posixpath.dirname(entry.path)
        if kinds.get(parent, "dir") != "dir":
            raise DeltaError(f"{entry.path} is inside {parent}, which is not a directory")
        if (entry.kind != "file" and entry.data) or (entry.kind != "symlink" and entry.target):
            raise DeltaError(f"{entry.path}: a {entry.kind} with data or a link target")
        if entry.kind == "symlink" and not entry.target:
            raise DeltaError(f"{entry.path}: a symlink to nothing")
        if not (0 <= entry.uid <= _MAX_ID and 0 <= entry.gid <= _MAX_ID and 0 <= entry.mtime <= _MAX_MTIME):
            raise DeltaError(f"{entry.path}: owner or mtime out of range")
        kinds[entry.path] = entry.kind
    for path in deleted:
        checked_path(path)
        if path in kinds:
            raise DeltaError(f"{path} is both deleted and changed")


def pack_delta(entries: Iterable[Entry], deleted: Iterable[str], caps: DeltaCaps = DeltaCaps()) -> Delta:
    """The canonical delta of ``entries`` and ``deleted`` (DeltaError: a rule broken; DeltaTooLargeError: caps)."""
    ordered = sorted(entries, key=lambda e: path_key(e.path))
    gone = topmost(deleted)
    _check(ordered, gone, caps)
    listing = json.dumps(gone, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        tar.addfile(_info(DELETED, tarfile.REGTYPE, 0o644, size=len(listing)), io.BytesIO(listing))
        for entry in ordered:
            tar.addfile(*_member(f"{ROOT}{entry.path}", entry))
    data = out.getvalue()
    return Delta(data, hashlib.sha256(data).hexdigest(), tuple(ordered), tuple(gone))


def restore_tar(delta: Delta) -> bytes:
    """The tar that makes a container of the image hold ``delta``'s entries when the daemon extracts it at ``/``
    (after the deletions): names relative to ``/``, owners, modes and mtimes kept."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for entry in delta.entries:
            tar.addfile(*_member(entry.path.lstrip("/"), entry))
    return out.getvalue()


def _info(name: str, kind: bytes, mode: int, *, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.mtime = kind, mode, size, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


_TYPES: dict[Kind, bytes] = {"dir": tarfile.DIRTYPE, "file": tarfile.REGTYPE, "symlink": tarfile.SYMTYPE}


def _member(name: str, entry: Entry) -> tuple[tarfile.TarInfo, io.BytesIO | None]:
    info = _info(name, _TYPES[entry.kind], entry.mode & _MODE_BITS, size=len(entry.data))
    info.uid, info.gid, info.mtime, info.linkname = entry.uid, entry.gid, entry.mtime, entry.target
    return info, io.BytesIO(entry.data) if entry.kind == "file" else None


def read_delta(data: bytes, caps: DeltaCaps = DeltaCaps()) -> Delta:
    """The delta ``data`` holds, if ``data`` is a canonical delta within ``caps``; DeltaError otherwise."""
    if len(data) > caps.max_bytes + caps.max_entries * 8192 + _DELETED_LIST_BYTES + (64 << 10):
        raise DeltaTooLargeError(f"a delta of {len(data)} bytes is over its caps")
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:", encoding="utf-8", errors="strict") as tar:
            members = tar.getmembers()
            if not members or members[0].name != DELETED or not members[0].isreg():
                raise DeltaError(f"a delta starts with its {DELETED!r} list")
            listing = _read(tar, members[0], _DELETED_LIST_BYTES)
            entries = [_entry(tar, member, caps) for member in members[1:]]
        deleted = json.loads(listing.decode("utf-8"))
    except (tarfile.TarError, UnicodeError, ValueError, RecursionError, EOFError) as exc:
        raise DeltaError(f"not a delta: {exc}") from None
    if not isinstance(deleted, list) or not all(isinstance(p, str) for p in deleted):
        raise DeltaError(f"the {DELETED!r} list is not a list of paths")
    delta = pack_delta(entries, deleted, caps)
    if delta.data != data:
        raise DeltaError("not a canonical delta (its entries are not in the one order and form)")
    return delta


def _entry(tar: tarfile.TarFile, member: tarfile.TarInfo, caps: DeltaCaps) -> Entry:
    if not member.name.startswith(f"{ROOT}/"):
        raise DeltaError(f"a delta member outside {ROOT}/: {member.name[:QUOTE_CHARS]!r}")
    path = member.name.removeprefix(ROOT)
    mtime = int(member.mtime)
    if member.isdir():
        return Entry(path, "dir", member.mode, member.uid, member.gid, mtime)
    if member.issym():
        return Entry(path, "symlink", member.mode, member.uid, member.gid, mtime, target=member.linkname)
    if member.isreg():
        data = _read(tar, member, caps.max_bytes)
        return Entry(path, "file", member.mode, member.uid, member.gid, mtime, data=data)
    raise DeltaError(f"{path[:QUOTE_CHARS]!r}: a delta holds directories, files and symlinks only")


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo, cap: int) -> bytes:
    if member.size > cap:
        raise DeltaTooLargeError(f"{member.name[:QUOTE_CHARS]!r} is {member.size} bytes: over {cap}")
    source = tar.extractfile(member)
    return source.read() if source is not None else b""


EMPTY = pack_delta((), ())
