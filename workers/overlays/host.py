"""What overlay steps need of this host, made once per worker: a directory under the process backend's run dir
(named for this process, so a dead worker's is swept), the id-mapped user namespace, the unpacked images,
the run cgroups and the seccomp filter. ``close()`` unmounts and removes what it made."""

from __future__ import annotations

import os
import secrets
import shutil
import threading
from pathlib import Path
from typing import Any

from schemas.errors import SandboxError
from schemas.settings import Settings
from workers.overlays.rootfs import ImageRootfs, RootfsCache
from workers.overlays.userns import make_userns
from workers.sandbox.cgroups import CgroupManager
from workers.sandbox.fork_server import HOST_ENV
from workers.sandbox.mounts import Mounter, remove_tree
from workers.sandbox.seccomp import build_filter


def image_rootfs_dir(settings: Settings) -> Path:
    """Where this host keeps unpacked task images (beside the toolchains' trees)."""
    return (settings.sandbox.toolchains_dir or settings.local.cache_dir / "sandbox") / "image-rootfs"


class OverlayHost:
    """Thread-safe; one per worker process."""

    def __init__(self, settings: Settings, client: Any) -> None:
        bwrap = shutil.which("bwrap", path=HOST_ENV["PATH"])
        nsenter = shutil.which("nsenter", path=HOST_ENV["PATH"])
        if bwrap is None or nsenter is None:
            raise SandboxError("image tasks on the process backend need bwrap (bubblewrap) and nsenter (util-linux)")
        self.bwrap, self.nsenter = bwrap, nsenter
        self.client = client
        self.mounter = Mounter()
        self.cgroups = CgroupManager(settings.sandbox.cgroup_parent)
        self.seccomp = build_filter()
        base = settings.sandbox.run_dir
        base.mkdir(parents=True, exist_ok=True)
        base.chmod(0o711)
        self.directory = base / f"{os.getpid()}-images-{secrets.token_hex(4)}"
        self.directory.mkdir(mode=0o711)
        self.directory.chmod(0o711)
        self._cache = RootfsCache(image_rootfs_dir(settings))
        self._lock = threading.Lock()
        self._closed = False
        self.prune()  # trees of images removed since the last worker
        try:
            self.userns = make_userns(self.mounter, self.directory / "userns")
        except (OSError, SandboxError) as exc:
            remove_tree(self.mounter, self.directory)
            raise SandboxError(f"cannot make the image tasks' user namespace: {exc}") from exc

    def rootfs(self, image: str) -> ImageRootfs:
        """``image`` unpacked on this host (once)."""
        return self._cache.rootfs(self.client, image)

    def prune(self) -> int:
        """Remove the unpacked trees of images the daemon no longer has; how many went."""
        return self._cache.prune(self.client)

    def close(self) -> None:
        """Unmount and remove this worker's directory; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        remove_tree(self.mounter, self.directory)
