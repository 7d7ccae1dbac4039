"""A task image's root filesystem unpacked on this host, once per image id (content-addressed, like the
toolchain rootfs): exported by the daemon, its owners shifted into the agent's id range (``ids``), its
environment kept beside it. The lower layer of every overlay step of the image."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.errors import SandboxError
from workers.overlays import ids

_READY = "ready.json"
_EXPORT_S = 600.0
#: What the daemon puts in every container and an image never has.
_DOCKER_FILES = (".dockerenv",)


@dataclass(frozen=True, slots=True)
class ImageRootfs:
    """An unpacked image: its tree, its id, and the environment its ``Config.Env`` gives every process."""

    path: Path
    image_id: str
    env: dict[str, str]


class RootfsCache:
    """Unpacked images under ``directory`` (0700), each made once per host (a file lock serialises makers)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()

    def rootfs(self, client: Any, image: str) -> ImageRootfs:
        """``image`` unpacked (SandboxError: the daemon or the unpacking failed: the host's)."""
        try:
            found = client.images.get(image)
        except Exception as exc:
            raise SandboxError(f"the image {image} is not on this host: {exc}") from exc
        image_id = str(found.id)
        target = self.directory / image_id.removeprefix("sha256:")
        if not (target / _READY).exists():  # checked first: steps of unpacked images never wait for an unpack
            with self._lock:
                self.directory.mkdir(parents=True, exist_ok=True)
                self.directory.chmod(0o700)
                with _file_lock(self.directory / f".{target.name}.lock"):
                    if not (target / _READY).exists():
                        _unpack(client, found, target)
        meta = json.loads((target / _READY).read_text())
        return ImageRootfs(target / "root", image_id, dict(meta["env"]))

    def prune(self, client: Any) -> int:
        """Remove the unpacked trees of images no longer on this host's daemon; how many went."""
        gone = 0
        if not self.directory.is_dir():
            return gone
        with self._lock:
            for tree in self.directory.iterdir():
                if tree.name.startswith(".") or not (tree / _READY).exists():
                    continue
                try:
                    client.images.get(f"sha256:{tree.name}")
                except Exception:
                    shutil.rmtree(tree, ignore_errors=True)
                    gone += 1
        return gone


def _unpack(client: Any, image: Any, target: Path) -> None:
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "root").mkdir(parents=True)
    container = client.containers.create(image.id, command=["/"], entrypoint=[], network_disabled=True)
    try:
        with tempfile.TemporaryFile() as errors:
            tar = subprocess.Popen(["tar", "-x", "--numeric-owner", "-C", str(partial / "root")],
                                   stdin=subprocess.PIPE, stderr=errors)  # fmt: skip
            assert tar.stdin is not None  # noqa: S101 - PIPE
            try:
                for chunk in container.export():
                    tar.stdin.write(chunk)
            finally:
                tar.stdin.close()
                tar.wait(timeout=_EXPORT_S)
            if tar.returncode != 0:
                errors.seek(0)
                raise SandboxError(f"unpacking {image.id} failed: {errors.read(4096).decode(errors='replace')}")
    finally:
        container.remove(force=True)
    root = partial / "root"
    for name in _DOCKER_FILES:
        with contextlib.suppress(FileNotFoundError):
            (root / name).unlink()
    shift_owners(root)
    env = dict(item.split("=", 1) for item in (image.attrs.get("Config") or {}).get("Env") or [] if "=" in item)
    (partial / _READY).write_text(json.dumps({"image_id": image.id, "env": env}))
    partial.rename(target)


def shift_owners(root: Path) -> None:
    """Give every file under ``root`` (itself included) the host ids of its image ids, modes kept (``chown``
    clears set-id bits)."""

    def shift(path: str) -> None:
        st = os.lstat(path)
        os.lchown(path, ids.to_host(st.st_uid), ids.to_host(st.st_gid))
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o6000:
            os.chmod(path, stat.S_IMODE(st.st_mode))

    shift(str(root))
    for directory, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            shift(os.path.join(directory, name))


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
