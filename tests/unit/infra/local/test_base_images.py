"""Which local base image ``ensure_base_image`` returns without building: a foreign image of the name is used as
it is, one of ours under another name is tagged, an unknown name is None. (Building is tested on the real
daemon in tests/sandbox/test_task_images.py.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from infra.local.base_images import LABEL, base_image_stamp, ensure_base_image
from schemas.settings import LocalPlatformSettings, Settings


class ImageNotFound(Exception):  # noqa: N818 - docker-py's name, matched by name
    """As docker.errors.ImageNotFound."""


@dataclass
class FakeImage:
    id: str
    labels: dict[str, str]


@dataclass
class FakeDocker:
    """Images by name; ``api.tag`` records tags; anything that would build is an AttributeError."""

    images_by_name: dict[str, FakeImage]
    tagged: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def images(self) -> FakeDocker:
        return self

    @property
    def api(self) -> FakeDocker:
        return self

    def get(self, ref: str) -> FakeImage:
        if ref not in self.images_by_name:
            raise ImageNotFound(ref)
        return self.images_by_name[ref]

    def tag(self, image_id: str, repository: str, tag: str, force: bool = False) -> None:
        self.tagged.append((image_id, repository, tag))
        self.images_by_name[f"{repository}:{tag}"] = next(i for i in self.images_by_name.values() if i.id == image_id)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(local=LocalPlatformSettings(cache_dir=tmp_path, ca_certificates_dir=tmp_path / "no-certs"))


def test_an_unknown_name_is_none(settings: Settings) -> None:
    assert ensure_base_image(settings, FakeDocker({}), "alpine:3.19") is None


def test_an_image_of_the_name_not_built_here_is_used_as_it_is(settings: Settings) -> None:
    pulled = FakeDocker({"python:3.11-slim": FakeImage("sha256:pulled", {"maintainer": "someone"})})
    assert ensure_base_image(settings, pulled, "python:3.11-slim") == "sha256:pulled"
    assert ensure_base_image(settings, pulled, "docker.io/library/python:3.11-slim") == "sha256:pulled"
    assert pulled.tagged == []


def test_one_of_ours_under_another_name_is_tagged_not_built(settings: Settings) -> None:
    stamp = base_image_stamp(settings, "debian:12-slim")
    assert stamp is not None
    assert stamp == base_image_stamp(settings, "debian:bookworm-slim") != base_image_stamp(settings, "python:3.11-slim")
    docker = FakeDocker({"debian:bookworm-slim": FakeImage("sha256:ours", {LABEL: stamp})})
    assert ensure_base_image(settings, docker, "debian:12-slim") == "sha256:ours"
    assert ("sha256:ours", "debian", "12-slim") in docker.tagged
    assert ensure_base_image(settings, docker, "debian:bookworm-slim") == "sha256:ours"


def test_the_stamp_follows_the_trusted_certificates(settings: Settings, tmp_path: Path) -> None:
    before = base_image_stamp(settings, "python:3.11-slim")
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "egress.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    with_cert = settings.model_copy(update={"local": settings.local.model_copy(update={"ca_certificates_dir": certs})})
    assert base_image_stamp(with_cert, "python:3.11-slim") != before
    assert base_image_stamp(settings, "alpine:3.19") is None
