"""Debian root filesystems built with mmdebstrap, and their ``docker import``: images made here, never pulled.

Shared by the sandbox toolchain trees (``sandbox_image``) and the local stand-ins of the official base images
(``base_images``), so both build the same safe way: mmdebstrap in a private mount namespace, bounded in time,
into a temporary tree that replaces the destination only once whole; and both import a tree the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from schemas.errors import PlatformError

BUILD_TIMEOUT_S = 900.0
#: The suite every tree is built from.
SUITE = "bookworm"


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (created if missing) for the block: one builder per tree or image."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _private_mounts() -> list[str]:
    """``unshare`` into a new mount namespace (root only, as ``--mode=root`` is), when available."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return []
    return [unshare, "--mount", "--propagation", "private"]


def build_rootfs(
    dest: Path,
    *,
    packages: Sequence[str],
    options: Sequence[str],
    mirrors: Sequence[str],
    timeout_s: float = BUILD_TIMEOUT_S,
) -> None:
    """``mmdebstrap --mode=root --variant=minbase`` of ``SUITE`` plus ``packages`` into ``dest`` (replaced whole).

    ``options`` are more mmdebstrap options (``--dpkgopt``, ``--customize-hook``...); ``mirrors`` its
    trailing mirror arguments (a URL or ``deb ...`` lines)."""
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise PlatformError("mmdebstrap is not installed (Debian package `mmdebstrap`)")
    tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    # In a private mount namespace: mmdebstrap mounts /proc, /sys and /dev inside the tree while it builds;
    # if it is killed half-way (a test or an `up` interrupted), those mounts die with the namespace
    # instead of staying behind on the host.
    cmd = [
        *_private_mounts(),
        mmdebstrap,
        "--mode=root",
        "--variant=minbase",
        *([f"--include={','.join(packages)}"] if packages else []),
        # update-alternatives (openjdk) needs the man dirs it links into, even with their files excluded.
        '--setup-hook=mkdir -p "$1/usr/share/man/man1"',
        *options,
        SUITE,
        str(tmp),
        *mirrors,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PlatformError(f"mmdebstrap failed to run: {exc}") from exc
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise PlatformError(f"mmdebstrap exited {proc.returncode}: {' | '.join(tail)}")
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)


def local_image(docker_client: Any, ref: str) -> Any | None:
    """The docker-py ``Image`` of local image ``ref``, or None when there is no such image."""
    try:
        return docker_client.images.get(ref)
    except Exception as exc:  # docker.errors.ImageNotFound; docker is optional at import time
        if type(exc).__name__ == "ImageNotFound":
            return None
        raise PlatformError(f"docker: cannot inspect image {ref}: {exc}") from exc


def import_tree(docker_client: Any, tree: Path, *, repository: str, tag: str, changes: Sequence[str]) -> None:
    """``docker import`` the tree as ``repository:tag`` with Dockerfile ``changes`` (ENV, CMD, LABEL...)."""
    tar_path = tree.with_name(tree.name + ".tar")
    try:
        with tarfile.open(tar_path, "w") as tar:
            tar.add(str(tree), arcname=".")
        docker_client.api.import_image_from_file(str(tar_path), repository=repository, tag=tag, changes=list(changes))
    except Exception as exc:
        raise PlatformError(f"docker import of {repository}:{tag} failed: {exc}") from exc
    finally:
        tar_path.unlink(missing_ok=True)
