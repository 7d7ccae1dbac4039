"""An episode's delta as an overlay's upper directory, and back: entries as files, directories and links with
the image's ids shifted to the host's, deletions as whiteouts (0/0 character devices), a directory the agent
replaced (``trusted.overlay.opaque``) as the deletion of what the image had in it. Only the host writes and
reads an upper directory, and only while no overlay is mounted on it; nothing in it is followed."""

from __future__ import annotations

import itertools
import os
import posixpath
import stat
from dataclasses import replace
from pathlib import Path

from workers.containers.changes import MAX_DELETED_BYTES, MAX_DROPPED, NOT_THE_AGENTS
from workers.containers.delta import (
    Delta,
    DeltaCaps,
    DeltaError,
    DeltaTooLargeError,
    Entry,
    checked_path,
    pack_delta,
    path_key,
)
from workers.overlays import ids

#: The xattr overlayfs marks a directory with when nothing of the image's shows through it.
OPAQUE = "trusted.overlay.opaque"
_WHITEOUT_PREFIX = ".wh."
_MAX_MTIME = (1 << 33) - 1
#: Directories deeper than this are left out of a delta (each level holds two fds while it is walked).
MAX_DEPTH = 128
#: The longest path a delta keeps on this backend: the next step restores it by host paths under the run's
#: directory, which must stay within the host's PATH_MAX (4096) however long the agent's paths are.
MAX_PATH_BYTES = 3584


def restore_upper(delta: Delta, upper: Path, lower: Path) -> None:
    """Make the empty ``upper`` hold ``delta`` over ``lower`` (DeltaError: a delta no overlay can hold)."""
    replaced = {e.path for e in delta.entries if e.kind != "dir"}  # a set: 20,000 of each must not cost n*m
    made: set[str] = set()
    for path in delta.deleted:
        if any(above in replaced for above in _ancestors(path)):
            continue  # a file or link of the delta replaces all of it (as ``rm -rf`` then the entry would)
        make_parents(upper, lower, path, made)
        os.mknod(upper / path.lstrip("/"), stat.S_IFCHR | 0o000, os.makedev(0, 0))
    for entry in sorted(delta.entries, key=lambda e: path_key(e.path)):
        make_parents(upper, lower, entry.path, made)
        target = upper / entry.path.lstrip("/")
        if entry.kind == "dir":
            if not target.is_dir() or target.is_symlink():
                target.mkdir()
            os.chmod(target, entry.mode)
        elif entry.kind == "file":
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(entry.data)
            os.chmod(target, entry.mode)
        else:
            os.symlink(entry.target, target)
        os.lchown(target, ids.to_host(entry.uid), ids.to_host(entry.gid))
        os.utime(target, (entry.mtime, entry.mtime), follow_symlinks=False)
    for entry in sorted((e for e in delta.entries if e.kind == "dir"), key=lambda e: path_key(e.path), reverse=True):
        os.utime(upper / entry.path.lstrip("/"), (entry.mtime, entry.mtime))  # after what was made inside it


def make_parents(upper: Path, lower: Path, path: str, made: set[str] | None = None) -> None:
    """The directories above ``path`` in ``upper``, made as the image has them (or root's 0755). One the delta
    deleted (a whiteout) becomes a new opaque directory: a delta that deletes a directory and adds paths inside
    it (valid, and what ``rm -rf`` then the entries makes on the docker backend) holds only those there.
    ``made``: the directories already seen to be there (and added to), so that thousands of entries 128 levels
    down cost one walk of their parents, not one each (seconds of the host's CPU on every step)."""
    walked = ""
    for name in path.strip("/").split("/")[:-1]:
        walked = f"{walked}/{name}"
        if made is not None and walked in made:
            continue
        if made is not None:
            made.add(walked)  # a directory once this turn ends (or DeltaError ends the restore)
        here = upper / walked.lstrip("/")
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            st = None
        if st is not None and not _whiteout(st):
            if not stat.S_ISDIR(st.st_mode):
                raise DeltaError(f"{path} is inside {walked}, which the delta does not make a directory")
            continue
        if st is not None:
            os.unlink(here)
        here.mkdir()
        try:
            image = os.lstat(lower / walked.lstrip("/"))
            mode, uid, gid = (stat.S_IMODE(image.st_mode), image.st_uid, image.st_gid)
            if not stat.S_ISDIR(image.st_mode):
                mode, uid, gid = 0o755, ids.BASE, ids.BASE
        except FileNotFoundError:
            mode, uid, gid = 0o755, ids.BASE, ids.BASE
        if st is not None:
            os.setxattr(here, OPAQUE, b"y")
            mode, uid, gid = 0o755, ids.BASE, ids.BASE
        os.chmod(here, mode)
        os.lchown(here, uid, gid)


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(2, len(parts))]


def _whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


class _UpperReader:
    """What one walk of an upper directory finds: entries, deletions, what it leaves out. The walk goes by
    directory fds (``openat``), never by host paths, so no depth the agent makes is too long a path for the host;
    it has no recursion, and directories below ``MAX_DEPTH`` are left out (named). It looks at no more names
    than a delta may hold plus those it may name as dropped: sockets, ``.wh.`` or non-UTF-8 names cost the agent
    no storage, only inodes, so millions of them would otherwise be listed into the host's memory."""

    def __init__(self, caps: DeltaCaps) -> None:
        self.caps = caps
        self.entries: list[Entry] = []
        self.deleted: list[str] = []
        self.dropped: list[str] = []
        self.size = 0
        self.names_left = caps.max_entries + MAX_DROPPED

    def walk(self, upper: Path, lower: Path) -> None:
        top = _open_dir(str(upper))
        try:
            image = _open_dir(str(lower))
        except BaseException:
            os.close(top)
            raise
        stack: list[_Dir] = [self._dir("/", top, image)]
        try:
            while stack:
                here = stack[-1]
                child = next(here.children, None)
                if child is None:
                    stack.pop().close()
                    continue
                inner = self._visit(here, child, len(stack))
                if inner is not None:
                    stack.append(inner)
        finally:
            for left in stack:
                left.close()

    def _dir(self, path: str, upper: int, lower: int | None) -> _Dir:
        """``_Dir`` of what the budget of names allows (DeltaTooLargeError: more are there); it owns ``upper`` and
        ``lower`` from now on, and closes them if it fails."""
        try:
            found = _Dir(path, upper, lower, self.names_left)
        except BaseException:
            _close(upper, lower)
            raise
        if found.count > self.names_left:
            found.close()
            raise DeltaTooLargeError(f"over {self.caps.max_entries} changed and deleted paths (and {MAX_DROPPED} "
                                     "left out): the upper directory has more names than that")  # fmt: skip
        self.names_left -= found.count
        return found

    def _visit(self, here: _Dir, child: os.DirEntry[str], depth: int) -> _Dir | None:
        path = posixpath.join(here.path, child.name)
        if not self._plain(child.name, path):
            return None
        st = child.stat(follow_symlinks=False)
        if _whiteout(st):
            self.deleted.append(path)
        elif stat.S_ISDIR(st.st_mode):
            if depth >= MAX_DEPTH:
                self._drop(path)
                return None
            return self._directory(here, child.name, path, st)
        elif stat.S_ISREG(st.st_mode):
            self._add(path, st, "file", data=self._data(here.upper, child.name, st.st_size))
        elif stat.S_ISLNK(st.st_mode):
            self._add(path, st, "symlink", target=os.readlink(child.name, dir_fd=here.upper))
        else:
            self._drop(path)
        return None

    def _directory(self, here: _Dir, name: str, path: str, st: os.stat_result) -> _Dir:
        mine = _open_dir(name, here.upper)
        theirs: int | None = None
        try:  # the caps may refuse this directory once its fds are open: a worker must not keep them
            image = _lstat_at(name, here.lower)
            theirs = _open_dir(name, here.lower) if image is not None and stat.S_ISDIR(image.st_mode) else None
            opaque = _xattr(mine, OPAQUE) == b"y"
            ours = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
            theirs_meta = None if image is None else (stat.S_IMODE(image.st_mode), image.st_uid, image.st_gid)
            same = theirs is not None and not opaque and theirs_meta == ours
            if not same:
                self._add(path, st, "dir")
            if opaque and theirs is not None:
                self._hidden(path, mine, theirs)
        except BaseException:
            _close(mine, theirs)
            raise
        return self._dir(path, mine, theirs)

    def _hidden(self, path: str, mine: int, theirs: int) -> None:
        """Deletions for what the image has in ``path`` and the agent's replacement of it has not: a directory
        of both is hidden below, one level at a time (the image's tree bounds the depth)."""
        pending = [(path, os.dup(mine), os.dup(theirs))]
        try:
            while pending:
                where, ours_fd, image_fd = pending.pop()
                try:
                    for name in sorted(os.listdir(image_fd)):
                        inner = posixpath.join(where, name)
                        ours = _lstat_at(name, ours_fd)
                        image = _lstat_at(name, image_fd)
                        if ours is None:
                            self.deleted.append(inner)
                        elif stat.S_ISDIR(ours.st_mode) and image is not None and stat.S_ISDIR(image.st_mode):
                            pending.append((inner, _open_dir(name, ours_fd), _open_dir(name, image_fd)))
                finally:
                    os.close(ours_fd)
                    os.close(image_fd)
        finally:
            for _, ours_fd, image_fd in pending:
                os.close(ours_fd)
                os.close(image_fd)

    def _plain(self, name: str, path: str) -> bool:
        try:
            checked_path(path)
            if len(path.encode("utf-8")) > MAX_PATH_BYTES:
                raise DeltaError(f"over {MAX_PATH_BYTES} bytes")
        except (UnicodeEncodeError, DeltaError):
            self._drop(path)
            return False
        if path in NOT_THE_AGENTS or any(path.startswith(p + "/") for p in NOT_THE_AGENTS):
            return False
        if name.startswith(_WHITEOUT_PREFIX):
            self._drop(path)
            return False
        return True

    def _data(self, directory: int, name: str, size: int) -> bytes:
        self.size += size
        if self.size > self.caps.max_bytes:
            raise DeltaTooLargeError(f"over {self.caps.max_bytes} bytes of changed files")
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
        with os.fdopen(fd, "rb") as handle:
            return handle.read(size + 1)[:size] if size else b""

    def _add(self, path: str, st: os.stat_result, kind: str, *, data: bytes = b"", target: str = "") -> None:
        if len(self.entries) + len(self.deleted) >= self.caps.max_entries:
            raise DeltaTooLargeError(f"over {self.caps.max_entries} changed and deleted paths")
        mtime = min(max(int(st.st_mtime), 0), _MAX_MTIME)
        self.entries.append(Entry(path, kind, stat.S_IMODE(st.st_mode) & 0o1777, ids.to_image(st.st_uid),  # type: ignore[arg-type]
                                  ids.to_image(st.st_gid), mtime, data, target))  # fmt: skip

    def _drop(self, path: str) -> None:
        if len(self.dropped) < MAX_DROPPED:
            self.dropped.append(path)


class _Dir:
    """A directory being walked: its path in the tree, its fd in the upper directory and in the image (None: the
    image has no directory there), and its remaining children, in name order (at most ``most`` + 1 listed)."""

    def __init__(self, path: str, upper: int, lower: int | None, most: int) -> None:
        self.path, self.upper, self.lower = path, upper, lower
        with os.scandir(upper) as found:
            listed = list(itertools.islice(found, most + 1))  # one over tells
        self.count = len(listed)
        self.children = iter(sorted(listed, key=lambda e: e.name))

    def close(self) -> None:
        _close(self.upper, self.lower)


def read_upper(upper: Path, lower: Path, caps: DeltaCaps) -> Delta:
    """The delta ``upper`` holds over ``lower`` (DeltaTooLargeError: over ``caps``)."""
    reader = _UpperReader(caps)
    reader.walk(upper, lower)
    if sum(len(p.encode("utf-8", "surrogateescape")) for p in reader.deleted) > MAX_DELETED_BYTES:
        raise DeltaTooLargeError(f"over {MAX_DELETED_BYTES} bytes of deleted paths")
    return replace(pack_delta(reader.entries, reader.deleted, caps), dropped=tuple(reader.dropped))


def _close(*fds: int | None) -> None:
    for fd in fds:
        if fd is not None:
            os.close(fd)


def _open_dir(name: str, parent: int | None = None) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)


def _lstat_at(name: str, parent: int | None) -> os.stat_result | None:
    if parent is None:
        return None
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _xattr(fd: int, name: str) -> bytes | None:
    try:
        return os.getxattr(fd, name)
    except OSError:
        return None
