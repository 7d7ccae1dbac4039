"""The user namespace every overlay step enters: the image's ids 0..65535 mapped to the host's ``ids.BASE``..,
made once per worker by a short-lived ``unshare`` whose namespace is kept by a bind mount of its ns file (so
no process holds it), entered by ``nsenter --user=FILE``."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from schemas.errors import SandboxError
from workers.overlays import ids
from workers.sandbox.mounts import MS_BIND, Mounter

_START_S = 10.0


def make_userns(mounter: Mounter, path: Path) -> Path:
    """A user namespace mapping the image's ids to the host's, kept at ``path`` (unmount it to drop it)."""
    own = os.stat("/proc/self/ns/user").st_ino
    holder = subprocess.Popen(["unshare", "--user", "--", "sleep", "60"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        ns = Path(f"/proc/{holder.pid}/ns/user")
        end = time.monotonic() + _START_S
        while _inode(ns) in (own, None):
            if holder.poll() is not None or time.monotonic() > end:
                raise SandboxError(f"unshare --user made no user namespace (exit {holder.poll()})")
            time.sleep(0.005)
        mapping = f"0 {ids.BASE} {ids.SIZE}\n"
        Path(f"/proc/{holder.pid}/uid_map").write_text(mapping)
        Path(f"/proc/{holder.pid}/gid_map").write_text(mapping)
        path.touch(mode=0o600)
        mounter.mount(str(ns), path, None, MS_BIND)
    finally:
        holder.kill()
        holder.wait()
    return path


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None
