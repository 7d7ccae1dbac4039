"""Host-side mounts for the process backend: the read-only bind of the sandbox rootfs the fork server runs on
(each run's capped tmpfs is mounted by the fork server inside the run's own mount namespace)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
from pathlib import Path

from schemas.errors import SandboxError

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2


class Mounter:
    """Thin ctypes wrapper over mount(2)/umount2(2) (no fork/exec per run)."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("c") or "libc.so.6"
        self._libc = ctypes.CDLL(name, use_errno=True)
        self._libc.mount.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
        ]
        self._libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]

    def mount(self, source: str, target: Path, fstype: str | None, flags: int, data: str | None = None) -> None:
        """mount(2); raise ``SandboxError`` with errno text on failure."""
        rc = self._libc.mount(
            source.encode(),
            str(target).encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        )
        if rc != 0:
            err = ctypes.get_errno()
            raise SandboxError(f"mount {source} on {target} failed: {os.strerror(err)}")

    def umount(self, target: Path) -> None:
        """Lazy-unmount ``target``; a target that is not mounted is fine."""
        rc = self._libc.umount2(str(target).encode(), MNT_DETACH)
        if rc != 0:
            err = ctypes.get_errno()
            if err not in (22, 2):  # EINVAL: not a mount point; ENOENT: gone
                raise SandboxError(f"umount {target} failed: {os.strerror(err)}")

    def bind_readonly(self, source: Path, target: Path) -> None:
        """Bind ``source`` on ``target`` read-only, nosuid, nodev, with private propagation."""
        self.mount(str(source), target, None, MS_BIND | MS_REC)
        try:
            self.mount("none", target, None, MS_PRIVATE | MS_REC)
            self.mount("none", target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        except SandboxError:
            self.umount(target)
            raise


def mounts_under(prefix: Path) -> list[Path]:
    """Mount points at or below ``prefix``, deepest first (from /proc/self/mountinfo)."""
    found: list[Path] = []
    text = Path("/proc/self/mountinfo").read_text()
    root = str(prefix).rstrip("/")
    for line in text.splitlines():
        mount_point = line.split()[4].replace("\\040", " ")
        if mount_point == root or mount_point.startswith(root + "/"):
            found.append(Path(mount_point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def remove_tree(mounter: Mounter, path: Path) -> None:
    """Unmount everything below ``path`` and delete it (never crossing into a still-mounted filesystem)."""
    for mount_point in mounts_under(path):
        mounter.umount(mount_point)
    if mounts_under(path):
        raise SandboxError(f"mounts remain under {path}")
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)
