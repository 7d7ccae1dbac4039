"""Files of a step's merged tree opened from the host as if it were ``/``: ``openat2`` with ``RESOLVE_IN_ROOT``
resolves every link, ``..`` and absolute path inside the tree, so an agent's symlink never leads the host (root)
out of it. Only used while nothing of the agent runs."""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import stat
from pathlib import Path

_SYS_OPENAT2 = 437  # the same number on every architecture (the unified syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_LIBC = ctypes.CDLL(None, use_errno=True)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def open_in_root(root_fd: int, path: str, flags: int, mode: int = 0) -> int:
    """``path`` opened below the directory ``root_fd`` as if it were the root; OSError as ``open`` raises."""
    how = _OpenHow(flags | os.O_CLOEXEC, mode, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
    fd = int(_LIBC.syscall(_SYS_OPENAT2, root_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how)))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


class TreeFiles:
    """Reads and writes of single files in a tree rooted at ``root``; new files and directories get ``owner``."""

    def __init__(self, root: Path, owner: tuple[int, int]) -> None:
        self.root = root
        self.owner = owner

    def read_file(self, path: str, cap: int) -> tuple[bytes, int] | str:
        """The first ``cap`` bytes of the regular file ``path`` and its size, or why it cannot be read."""
        root = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = open_in_root(root, path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as exc:
            return _why(exc, path)
        finally:
            os.close(root)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return f"not a regular file: {path}"
            data = bytearray()
            while len(data) < cap and (chunk := os.read(fd, min(cap - len(data), 1 << 20))):
                data += chunk
            return bytes(data), st.st_size
        finally:
            os.close(fd)

    def write_file(self, path: str, data: bytes) -> str | None:
        """Write ``data`` to ``path`` (mode 0644, owned by ``owner``, missing directories made), or say why not.
        A link at ``path`` itself is replaced by the file, as extracting a tar there would; links on the way to
        it are followed inside the tree."""
        parent = self._directory(posixpath.dirname(path))
        if isinstance(parent, str):
            return parent
        name = posixpath.basename(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            try:
                fd = os.open(name, flags, 0o644, dir_fd=parent)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                os.unlink(name, dir_fd=parent)
                fd = os.open(name, flags | os.O_EXCL, 0o644, dir_fd=parent)
        except OSError as exc:
            return _why(exc, path)
        finally:
            os.close(parent)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return f"not a regular file: {path}"
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchown(fd, *self.owner)
            os.fchmod(fd, 0o644)
            return None
        except OSError as exc:  # ENOSPC: the agent's write over its storage_mb is its own, not the host failing
            return _why(exc, path)
        finally:
            os.close(fd)

    def _directory(self, path: str) -> int | str:
        """A read fd of directory ``path`` (made, with its missing parents, when absent), or why not."""
        root = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            walked = "/"
            for name in [p for p in path.split("/") if p]:
                here = posixpath.join(walked, name)
                try:
                    os.close(open_in_root(root, here, os.O_PATH | os.O_DIRECTORY))
                except FileNotFoundError:
                    above = open_in_root(root, walked, os.O_RDONLY | os.O_DIRECTORY)
                    try:
                        os.mkdir(name, 0o755, dir_fd=above)
                        os.chown(name, *self.owner, dir_fd=above, follow_symlinks=False)
                    finally:
                        os.close(above)
                walked = here
            return open_in_root(root, walked, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            return _why(exc, path)
        finally:
            os.close(root)


def _why(exc: OSError, path: str) -> str:
    if exc.errno == errno.EISDIR:
        return f"is a directory: {path}"
    if exc.errno == errno.ENOENT:
        return f"no such file: {path}"
    if exc.errno == errno.ELOOP:
        return f"too many symlinks from {path}"
    if exc.errno == errno.ENOTDIR:
        return f"not a directory on the way to {path}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left for {path}: the task's storage_mb is full"
    return f"{path}: {exc.strerror}"
