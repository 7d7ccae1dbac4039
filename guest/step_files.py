"""The ``write`` and ``read`` actions of an agent step: a file of the workspace written or read, never through a
link out of it.

Guest code (standard library only), spliced into the episode step runner (``step_runner``).
"""

from __future__ import annotations

import os
import stat

from guest.plumbing import b64, write_all
from guest.step_errors import StepError
from guest.workspace_paths import DIR_FLAGS, Cursor, check_path

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

#: Symbolic links a read follows at most, in all (Linux's own ``MAXSYMLINKS``): a longer chain, or a loop, is
#: ``rejected`` with that reason.
MAX_SYMLINKS = 40


def do_write(job: dict[str, Any], data: bytes) -> dict[str, Any]:
    """Write ``data`` to the path (parents made); never through or onto a link, never outside the work dir.
    Each name is looked up in its parent's fd (``Cursor``): nothing is resolved twice, nothing followed."""
    parts = check_path(job.get("path"))
    cursor = Cursor()
    try:
        for i, part in enumerate(parts):
            try:
                mode: int | None = os.lstat(part, dir_fd=cursor.fd).st_mode
            except FileNotFoundError:
                mode = None
            shown = "/".join(parts[: i + 1])
            if mode is not None and stat.S_ISLNK(mode):
                raise StepError(f"{shown} is a symlink: writes never go through one")
            if i == len(parts) - 1:
                if mode is not None and not stat.S_ISREG(mode):
                    raise StepError(f"{shown} is not a regular file")
                break
            if mode is None:
                os.mkdir(part, 0o755, dir_fd=cursor.fd)
            elif not stat.S_ISDIR(mode):
                raise StepError(f"{shown} is not a directory")
            cursor.down(part.encode("utf-8"))
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(parts[-1], flags, 0o644, dir_fd=cursor.fd)
    finally:
        cursor.close()
    try:
        write_all(fd, data)
    finally:
        os.close(fd)
    return {"bytes": len(data)}


def do_read(job: dict[str, Any], cap: int) -> dict[str, Any]:
    """The content of a regular file in the work dir (links followed only while they stay inside it)."""
    parts = check_path(job.get("path"))
    fd = open_inside(parts, job["path"])
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StepError(f"{job['path']} is not a regular file")
        buf = bytearray()
        while len(buf) <= cap and (chunk := os.read(fd, 1 << 20)):
            buf += chunk
    finally:
        os.close(fd)
    return {"content": b64(buf[:cap]), "size": min(len(buf), cap), "truncated": len(buf) > cap}


def open_inside(parts: list[str], shown: str) -> int:
    """An fd of the regular file that ``parts`` names in the work dir. Links are followed as the kernel
    follows them (``MAX_SYMLINKS`` at most in all, so a long chain or a loop is a clear rejection), but by
    this loop, one name at a time relative to an open directory: no recursion however long the chain, and
    where it leads is known before anything is opened. That must be inside the work dir; StepError if not.
    Only used while no other process runs (a read step runs no command)."""
    root = [p for p in os.getcwd().split("/") if p]
    where = list(root)  # the real path reached so far, as names
    pending = parts[::-1]  # the names still to walk, the next one last
    links = 0
    fd = os.open(".", DIR_FLAGS)
    try:
        while pending:
            part = pending.pop()
            if part in ("", ".", ".."):
                if part == ".." and where:
                    fd = _moved(fd, "..")
                    where.pop()
                continue
            try:
                mode = os.lstat(part, dir_fd=fd).st_mode
            except FileNotFoundError:
                raise _missing(shown, [*where, part], pending, root) from None
            if stat.S_ISLNK(mode):
                links += 1
                if links > MAX_SYMLINKS:
                    raise StepError(f"{shown}: too many levels of symbolic links (a loop, or more than "
                                    f"{MAX_SYMLINKS} links in a row)")  # fmt: skip
                target = os.readlink(part, dir_fd=fd)
                if target.startswith("/"):
                    fd, where = _moved(fd, "/"), []
                pending += reversed(target.split("/"))
            elif not pending:
                return _open_last(fd, part, mode, inside=[*where, part][: len(root)] == root, shown=shown)
            elif stat.S_ISDIR(mode):  # a name before others (or before a trailing "/")
                fd = _moved(fd, part)
                where.append(part)
            else:
                raise StepError(f"{shown}: not a directory on the way")
        if where[: len(root)] != root:  # it ended on a directory ("..", "." or a trailing "/" last)
            raise StepError(f"{shown} leads outside the workspace")
        raise StepError(f"{shown} is not a regular file")
    finally:
        os.close(fd)


def _missing(shown: str, where: list[str], pending: list[str], root: list[str]) -> StepError:
    """Why a read whose walk met a missing name fails: where the path would have led (``where``, the missing
    name last, with the names still ``pending`` applied as plain names, as ``realpath`` does) is outside the
    work dir, or nothing is there."""
    led = list(where)
    for part in reversed(pending):
        if part == "..":
            led = led[:-1]
        elif part not in ("", "."):
            led.append(part)
    if led[: len(root)] != root:
        return StepError(f"{shown} leads outside the workspace")
    return StepError(f"{shown}: no such file")


def _open_last(dir_fd: int, name: str, mode: int, *, inside: bool, shown: str) -> int:
    """The file a read's walk ended on, opened if it is a regular file in the work dir."""
    if not inside:
        raise StepError(f"{shown} leads outside the workspace")
    if not stat.S_ISREG(mode):
        raise StepError(f"{shown} is not a regular file")
    return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)


def _moved(fd: int, name: str) -> int:
    """The directory ``name`` of ``fd`` opened (``fd`` closed once it is)."""
    new = os.open(name, DIR_FLAGS, dir_fd=fd)
    os.close(fd)
    return new
