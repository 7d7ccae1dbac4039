"""The workspace of an agent step in and out of the sandbox: the snapshot the host sent restored under the
work dir, and the work dir packed back into a tar once no other process of the step runs.

Why it is careful: ``restore`` checks the snapshot anyway (plain relative paths, nothing under a
non-directory, links made last) and writes only under the work dir; ``pack`` follows nothing, drops FIFOs,
sockets and devices, keeps only the owner-execute bit and stops at the caps. The host re-validates and
re-packs whatever comes back, so the tar made here is never trusted, only convenient.

Guest code (standard library only), spliced into the episode step runner (``step_runner``), and run by the grading
harness (the step runner's source) to restore a workspace job.
"""

from __future__ import annotations

import os
import stat

from guest.plumbing import write_all
from guest.step_errors import JobError, WorkspaceError
from guest.workspace_paths import Cursor, plain_name
from guest.workspace_tar import tar_end, tar_entry, tar_members

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

MAX_DROPPED = 100
_NOT_PLAIN = frozenset((b"", b".", b".."))  # names a member's path never holds


def restore(data: bytes | bytearray | memoryview) -> int:
    """Write the snapshot's members under the (empty) cwd; the number of members. They are taken in path
    order (a canonical snapshot's own: parents first, and everything under a name right after it) through
    one ``Cursor``, so the restore is linear in the snapshot however deep its tree. Links are made last:
    none is ever in the way of a later member."""
    if os.listdir("."):
        raise JobError("the work dir is not empty")
    members = tar_members(data)
    for name, *_ in members:
        if name.startswith(b"/") or b"\0" in name or _NOT_PLAIN.intersection(name.split(b"/")):
            raise JobError(f"snapshot member {name[:200]!r} is not a plain relative path")
    members.sort(key=lambda member: member[0].split(b"/"))
    seen: set[bytes] = set()
    under = b"\0"  # the last file or link + "/": in path order, what lies under it comes right after it
    links: list[tuple[bytes, bytes, bytes]] = []  # (parent, name, target)
    cursor = Cursor()
    try:
        for name, kind, mode, body, link in members:
            if name in seen or name.startswith(under):
                raise JobError(f"snapshot member {name[:200]!r} repeats a name or lies under a non-directory")
            seen.add(name)
            if kind == b"5":
                cursor.toward(name)
                continue
            under = name + b"/"
            parent, _, base = name.rpartition(b"/")
            if kind == b"2":
                links.append((parent, base, link))
                continue
            cursor.toward(parent)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(base, flags, 0o644, dir_fd=cursor.fd)
            try:
                write_all(fd, body)
                os.fchmod(fd, 0o755 if mode & stat.S_IXUSR else 0o644)
            finally:
                os.close(fd)
        for parent, base, link in links:
            cursor.toward(parent)
            os.symlink(link, base, dir_fd=cursor.fd)
    finally:
        cursor.close()
    return len(seen)


# --------------------------------------------------------------------------------------------------------
# Pack (no other process is alive by now: the sweep made sure)


class Packer:
    """One walk of the work dir into a tar, within the caps and the byte budget of the frame."""

    def __init__(self, max_bytes: int, max_entries: int, budget: int) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.budget = budget
        self.chunks: list[bytes] = []
        self.size = 0
        self.entries = 0
        self.bytes = 0
        self.dropped: list[str] = []
        self.n_dropped = 0

    def pack(self) -> list[bytes]:
        """The tar of the cwd, as chunks (``self.size`` bytes in all): never copied into one object."""
        _readable_dir(".", os.lstat(".").st_mode)
        cursor = Cursor()
        try:
            self.walk(cursor)
        finally:
            cursor.close()
        self.add(tar_end(self.size))
        return self.chunks

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.budget:
            raise WorkspaceError(f"the workspace's tar is over {self.budget} bytes")
        self.chunks.append(chunk)

    def drop(self, name: str) -> None:
        self.n_dropped += 1
        if len(self.dropped) < MAX_DROPPED:
            self.dropped.append(name.encode("utf-8", "backslashreplace").decode("utf-8")[:200])

    def walk(self, cursor: Cursor) -> None:
        """Depth first, names sorted in each directory (``snapshot.pack``'s order), no recursion: each
        directory's listing waits on a stack while the cursor is below it."""
        stack: list[tuple[str, list[str]]] = [("", sorted(os.listdir(cursor.fd), reverse=True))]
        while stack:
            prefix, names = stack[-1]
            if not names:
                stack.pop()
                if stack:
                    cursor.up()
                continue
            name = names.pop()
            path = prefix + name
            if not plain_name(path):  # a deeper name would be longer still: nothing under it is walked
                self.drop(path)
                continue
            st = os.lstat(name, dir_fd=cursor.fd)
            if not (stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                self.drop(path)  # FIFO, socket, device: nothing of it survives the step
                continue
            self.entries += 1
            if self.entries > self.max_entries:
                raise WorkspaceError(f"the workspace has more than {self.max_entries} entries")
            encoded, local = path.encode("utf-8"), name.encode("utf-8")
            if stat.S_ISLNK(st.st_mode):
                self.add(tar_entry(encoded, b"2", mode=0o777, link=os.readlink(local, dir_fd=cursor.fd)))
            elif stat.S_ISDIR(st.st_mode):
                self.add(tar_entry(encoded + b"/", b"5", mode=0o755))
                _readable_dir(name, st.st_mode, cursor.fd)
                cursor.down(local)
                stack.append((path + "/", sorted(os.listdir(cursor.fd), reverse=True)))
            else:
                data = _read_file(name, path, cursor.fd, st.st_mode, self.max_bytes - self.bytes)
                self.bytes += len(data)
                self.add(tar_entry(encoded, b"0", data, 0o755 if st.st_mode & stat.S_IXUSR else 0o644))


def _readable_dir(name: str, mode: int, dir_fd: int | None = None) -> None:
    """A directory the agent made unreadable to its owner (us) is made readable again (its mode is not kept)."""
    if mode & 0o500 != 0o500:
        os.chmod(name, 0o700, dir_fd=dir_fd)


def _read_file(name: str, path: str, dir_fd: int, mode: int, limit: int) -> bytes:
    if not mode & stat.S_IRUSR:
        os.chmod(name, 0o600, dir_fd=dir_fd)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise WorkspaceError(f"{path[:200]} changed while it was packed")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > limit:
                raise WorkspaceError("the workspace is over its byte cap")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def pack_workspace(job: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    """The workspace record and the tar's chunks (none when the workspace cannot be kept: the record says
    why). What the agent left is never the runner's failure: anything that stops the pack is reported."""
    packer = Packer(int(job["max_bytes"]), int(job["max_entries"]), int(job["tar_budget"]))
    try:
        tar = packer.pack()
    except (WorkspaceError, OSError, RecursionError) as exc:
        error = str(exc) if isinstance(exc, WorkspaceError) else f"cannot pack the workspace: {exc}"
        return {"packed": False, "error": error[:2000]}, []
    record = {"packed": True, "entries": packer.entries, "bytes": packer.bytes, "tar_bytes": packer.size}
    return {**record, "dropped": packer.dropped, "n_dropped": packer.n_dropped}, tar


def same_bytes(chunks: list[bytes], view: memoryview) -> bool:
    """``chunks`` joined equal ``view`` (compared in place: no copy of either)."""
    pos = 0
    for chunk in chunks:
        if view[pos : pos + len(chunk)] != chunk:
            return False
        pos += len(chunk)
    return pos == len(view)
