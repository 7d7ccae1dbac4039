"""Images for the node without any registry: built here as docker-archive tarballs, or saved from the local
docker, then imported into the private containerd's ``k8s.io`` namespace with ``ctr``.

The smallest image is Debian's static busybox (package busybox-static) alone in a rootfs: it is the pod
sandbox ("pause") image and runs test workloads. Pods that use such images say ``imagePullPolicy: Never``.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from infra.k8s.layout import K8sPaths
from schemas.errors import PlatformError

BUSYBOX_IMAGE = "localhost/rs-k8s-busybox:1"
BUSYBOX = Path("/bin/busybox")
_APPLETS = ("sh", "sleep", "cat", "echo", "hostname", "ls", "env")


def _layer(busybox: Path) -> bytes:
    """An uncompressed layer tar: /bin/busybox, a few applet links, and the dirs a container needs."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for directory in ("bin", "dev", "etc", "proc", "sys", "tmp"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            layer.addfile(info)
        data = busybox.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        layer.addfile(info, io.BytesIO(data))
        for applet in _APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            layer.addfile(link)
    return out.getvalue()


def busybox_archive(dest: Path, tag: str = BUSYBOX_IMAGE, busybox: Path = BUSYBOX) -> Path:
    """Write a docker-archive (``docker save`` layout) of the busybox image to ``dest``."""
    if not busybox.exists():
        raise PlatformError(f"{busybox} not found: install Debian's busybox-static (apt-get install busybox-static)")
    layer = _layer(busybox)
    diff_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/bin/busybox", "sleep", "2147483647"], "Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
            "history": [{"created_by": f"rewardstream infra.k8s.images from {busybox}"}],
        },
        sort_keys=True,
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": [f"{diff_id}/layer.tar"]}]).encode()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, mode="w") as archive:
        for name, data in ((f"{diff_id}/layer.tar", layer), (config_name, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return dest


def ctr_import(paths: K8sPaths, archive: Path) -> None:
    """Import a docker-archive or OCI tarball into the private containerd, where the kubelet's CRI finds it."""
    argv = ["ctr", "--address", str(paths.containerd_socket), "--namespace", "k8s.io", "images", "import", str(archive)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PlatformError(f"ctr images import {archive.name} failed: {result.stderr.strip()}")


def import_busybox(paths: K8sPaths) -> str:
    """Build and import the busybox image; return its name."""
    ctr_import(paths, busybox_archive(paths.cluster / "images" / "busybox.tar"))
    return BUSYBOX_IMAGE


def import_docker_image(paths: K8sPaths, image: str) -> None:
    """Move an image from the local docker into the private containerd (``docker save``, then ``ctr import``)."""
    if shutil.which("docker") is None:
        raise PlatformError(f"docker is needed to export {image}: apt-get install docker.io")
    with tempfile.TemporaryDirectory(dir=paths.cluster) as scratch:
        archive = Path(scratch) / "image.tar"
        result = subprocess.run(
            ["docker", "save", "-o", str(archive), image], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise PlatformError(f"docker save {image} failed: {result.stderr.strip()}")
        ctr_import(paths, archive)


def images(paths: K8sPaths) -> list[str]:
    """Names of the images the node has."""
    argv = ["ctr", "--address", str(paths.containerd_socket), "--namespace", "k8s.io", "images", "ls", "-q"]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PlatformError(f"ctr images ls failed: {result.stderr.strip()}")
    return result.stdout.split()
