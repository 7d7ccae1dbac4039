"""The busybox image is a well-formed docker archive: its layer's digest is the one its config names."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from infra.k8s.images import BUSYBOX, BUSYBOX_IMAGE, busybox_archive
from schemas.errors import PlatformError


@pytest.mark.skipif(not BUSYBOX.exists(), reason="needs Debian's busybox-static")
def test_archive_layout_and_digests(tmp_path: Path) -> None:
    archive = busybox_archive(tmp_path / "image.tar")
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        (entry,) = manifest
        assert entry["RepoTags"] == [BUSYBOX_IMAGE]
        config_bytes = tar.extractfile(entry["Config"]).read()  # type: ignore[union-attr]
        layer_bytes = tar.extractfile(entry["Layers"][0]).read()  # type: ignore[union-attr]
    assert entry["Config"] == hashlib.sha256(config_bytes).hexdigest() + ".json"
    config = json.loads(config_bytes)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()]
    assert config["config"]["Entrypoint"][0] == "/bin/busybox"
    layer_path = tmp_path / "layer.tar"
    layer_path.write_bytes(layer_bytes)
    with tarfile.open(layer_path) as layer:
        members = {m.name: m for m in layer.getmembers()}
    assert members["bin/busybox"].size == BUSYBOX.stat().st_size
    assert members["bin/sh"].issym()
    assert members["bin/sh"].linkname == "busybox"


def test_a_missing_busybox_says_which_package(tmp_path: Path) -> None:
    with pytest.raises(PlatformError, match="busybox-static"):
        busybox_archive(tmp_path / "image.tar", busybox=tmp_path / "nope")
