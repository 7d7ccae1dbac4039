"""The sandbox root filesystem, built locally from Debian packages (mmdebstrap) and never pulled.

One tree serves both backends: the ``process`` backend binds it read-only as ``/`` (so no host file is
ever visible to candidate code), and the ``docker`` backend imports it as
``rewardstream-sandbox-python:<version>``.
Building is idempotent and guarded by a file lock, so concurrent callers build it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from schemas.errors import PlatformError
from schemas.settings import Settings

_SANDBOX_USER = "sandbox"
#: What an agent's commands may count on (the episode contract): ``python`` and ``python3``, pytest and git.
#: Recommends are not installed (mmdebstrap's default), so git brings perl-base's needs, not perl's docs.
PACKAGES = ("python3", "python-is-python3", "python3-pytest", "git")
_BUILD_TIMEOUT_S = 900.0
_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")


def image_version(settings: Settings) -> str:
    """The tag of ``settings.sandbox_image`` (``latest`` when untagged); it versions the rootfs too."""
    return settings.sandbox_image_version()


def _stamp(settings: Settings) -> dict[str, Any]:
    return {
        "version": image_version(settings),
        "uid": settings.sandbox_uid,
        "mirror": settings.debian_mirror,
        "suite": "bookworm",
        "packages": list(PACKAGES),
        "layout": 2,
    }


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
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


def rootfs_path(settings: Settings) -> Path:
    """Where the tree for the current settings lives (it may not exist yet)."""
    return settings.sandbox_rootfs_path()


def ensure_sandbox_rootfs(settings: Settings) -> Path:
    """Build the rootfs once (mmdebstrap minbase + ``PACKAGES`` + a non-root ``sandbox`` user); return it."""
    dest = rootfs_path(settings)
    stamp_file = dest.with_name(dest.name + ".json")
    wanted = _stamp(settings)
    with _locked(dest.with_name(dest.name + ".lock")):
        if dest.is_dir() and stamp_file.is_file() and json.loads(stamp_file.read_text()) == wanted:
            return dest
        mmdebstrap = shutil.which("mmdebstrap")
        if mmdebstrap is None:
            raise PlatformError("mmdebstrap is not installed (Debian package `mmdebstrap`)")
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        uid = settings.sandbox_uid
        hooks = [
            f'chroot "$1" groupadd --gid {uid} {_SANDBOX_USER}',
            f'chroot "$1" useradd --uid {uid} --gid {uid} --no-create-home --home-dir /work '
            f"--shell /usr/sbin/nologin {_SANDBOX_USER}",
            # Owned by the sandbox user: docker copies this ownership onto the /work tmpfs.
            f'mkdir -p "$1/work" && chown {uid}:{uid} "$1/work" && chmod 0755 "$1/work"',
            # Nothing host-specific or reusable stays inside: apt lists/caches, machine id, logs.
            'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/* "$1"/etc/machine-id',
            'rm -f "$1"/etc/hostname "$1"/etc/resolv.conf && : > "$1/etc/resolv.conf"',
        ]
        # In a private mount namespace: mmdebstrap mounts /proc, /sys and /dev inside the tree while it builds;
        # if it is killed half-way (a test or an `up` interrupted), those mounts die with the namespace
        # instead of staying behind on the host.
        cmd = [
            *_private_mounts(),
            mmdebstrap,
            "--mode=root",
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            *(f"--dpkgopt=path-exclude={p}" for p in _EXCLUDES),
            *(f"--customize-hook={h}" for h in hooks),
            "bookworm",
            str(tmp),
            settings.debian_mirror,
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=_BUILD_TIMEOUT_S, check=False)
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
        stamp_file.write_text(json.dumps(wanted))
        return dest


_STAMP_LABEL = "rewardstream.rootfs"


def _stamp_id(settings: Settings) -> str:
    return hashlib.sha256(json.dumps(_stamp(settings), sort_keys=True).encode()).hexdigest()[:16]


def _image_present(docker_client: Any, tag: str, stamp: str) -> bool:
    """True when ``tag`` exists and was imported from the rootfs these settings describe."""
    try:
        image = docker_client.images.get(tag)
    except Exception as exc:  # docker.errors.ImageNotFound; docker is optional at import time
        if type(exc).__name__ == "ImageNotFound":
            return False
        raise PlatformError(f"docker: cannot inspect image {tag}: {exc}") from exc
    return bool((image.labels or {}).get(_STAMP_LABEL) == stamp)


def ensure_sandbox_image(settings: Settings, docker_client: Any) -> str:
    """Make sure ``rewardstream-sandbox-python:<version>`` exists (``docker import``); return the tag."""
    repo = (
        settings.sandbox_image.rsplit(":", 1)[0]
        if ":" in settings.sandbox_image.rsplit("/", 1)[-1]
        else (settings.sandbox_image)
    )
    tag = f"{repo}:{image_version(settings)}"
    stamp = _stamp_id(settings)
    if _image_present(docker_client, tag, stamp):
        return tag
    rootfs = ensure_sandbox_rootfs(settings)
    tar_path = rootfs.with_name(rootfs.name + ".tar")
    with _locked(rootfs.with_name(rootfs.name + ".lock")):
        if _image_present(docker_client, tag, stamp):
            return tag
        try:
            with tarfile.open(tar_path, "w") as tar:
                tar.add(str(rootfs), arcname=".")
            docker_client.api.import_image_from_file(
                str(tar_path),
                repository=repo,
                tag=image_version(settings),
                changes=[
                    f"USER {settings.sandbox_uid}:{settings.sandbox_uid}",
                    "WORKDIR /work",
                    "ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8",
                    f"LABEL {_STAMP_LABEL}={stamp}",
                ],
            )
        except Exception as exc:
            raise PlatformError(f"docker import of the sandbox image failed: {exc}") from exc
        finally:
            tar_path.unlink(missing_ok=True)
    if not _image_present(docker_client, tag, stamp):
        raise PlatformError(f"docker import did not produce {tag}")
    return tag
