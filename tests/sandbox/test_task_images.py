"""Harbor task images on the real daemon: built from an ``environment/`` context FROM the local base images
(no registry), once, bounded in time, run with ``--network none``.

The base images are a cache and stay; every ``rs-task/*`` image a test makes is removed after it.
"""

from __future__ import annotations

import functools
import hashlib
import io
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.local.base_images import LABEL, ensure_base_image
from schemas.settings import Settings
from workers.images.task_images import BuiltImage, TaskImageError, ensure_task_image, task_image_tag

BUILD_TIMEOUT_S = 600.0
#: A second ensure of a present image only inspects it.
PRESENT_S = 5.0


def context_tar(dockerfile: str) -> tuple[bytes, str]:
    """An ``environment/`` context (Dockerfile + a nonce, so each test's image is its own) and its digest."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), "nonce": uuid.uuid4().hex.encode()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    return raw, hashlib.sha256(raw).hexdigest()


@pytest.fixture(scope="module")
def base_image(settings: Settings, docker_client: Any) -> Callable[[str], str | None]:
    return functools.partial(ensure_base_image, settings, docker_client)


@pytest.fixture
def build(docker_client: Any, base_image: Callable[[str], str | None], tmp_path: Path) -> Iterator[Any]:
    """``build(context, digest, timeout_s=...)``: ensure_task_image; every image it made is removed after."""
    made: list[str] = []

    def ensure(context: bytes, digest: str, timeout_s: float = BUILD_TIMEOUT_S) -> BuiltImage:
        image = ensure_task_image(
            docker_client,
            context,
            digest,
            build_timeout_s=timeout_s,
            base_image=base_image,
            lock_dir=tmp_path / "locks",
        )
        made.append(image.tag)
        return image

    yield ensure
    for tag in set(made):
        docker_client.images.remove(tag, force=True, noprune=True)  # a parent layer may be in a build


def run(docker_client: Any, image: str, *argv: str) -> str:
    out = docker_client.containers.run(image, list(argv), network_mode="none", remove=True)
    return bytes(out).decode().strip()


def absent(docker_client: Any, ref: str) -> bool:
    try:
        docker_client.images.get(ref)
    except Exception as exc:
        if type(exc).__name__ == "ImageNotFound":
            return True
        raise
    return False


def test_a_python_task_builds_once_and_runs_with_no_network(docker_client: Any, build: Any) -> None:
    context, digest = context_tar("FROM python:3.11-slim\nRUN pip install six==1.16.0\nWORKDIR /app\n")
    first = build(context, digest)
    print(f"python task image built in {first.seconds:.1f}s")
    assert first.built
    assert first.tag.startswith("rs-task/")
    assert docker_client.images.get(first.tag).labels["rewardstream.task-context"] == digest
    assert run(docker_client, first.tag, "python", "-c", "import os, six; print(six.__version__, os.getcwd())") == (
        "1.16.0 /app"
    )
    again = build(context, digest)
    assert (again.built, again.tag, again.image_id) == (False, first.tag, first.image_id)
    assert again.seconds < PRESENT_S


def test_a_debian_task_installs_packages_with_apt(docker_client: Any, build: Any) -> None:
    dockerfile = (
        "FROM debian:bookworm-slim\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends jq && rm -rf /var/lib/apt/lists/*\n"
    )
    image = build(*context_tar(dockerfile))
    print(f"debian task image built in {image.seconds:.1f}s")
    assert run(docker_client, image.tag, "sh", "-c", "echo '{\"a\": 7}' | jq .a") == "7"


def test_a_failing_run_step_is_an_error_with_the_commands_output(docker_client: Any, build: Any) -> None:
    context, digest = context_tar("FROM debian:bookworm-slim\nRUN echo the-step-said-this && exit 3\n")
    with pytest.raises(TaskImageError) as caught:
        build(context, digest)
    message = str(caught.value)
    assert digest in message
    assert "the-step-said-this" in message
    assert "non-zero code: 3" in message


def test_an_unknown_base_is_refused_naming_it_and_the_known_ones(build: Any) -> None:
    context, digest = context_tar("FROM alpine:3.19\nRUN true\n")
    with pytest.raises(TaskImageError, match=r"base image alpine:3.19 is not available here") as caught:
        build(context, digest)
    assert "python:3.11-slim" in str(caught.value)
    assert digest in str(caught.value)


def _build_leftovers(docker_client: Any, marker: str) -> list[str]:
    """Containers and host processes still running the step that carries ``marker``."""
    # One listing call (its rows carry each command), not a listing then an inspect per container: a container
    # another test removes in between would fail the inspect.
    containers = [row["Id"] for row in docker_client.api.containers(all=True) if marker in (row.get("Command") or "")]
    processes = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                processes.append(cmdline.parent.name)
        except OSError:
            continue
    return containers + processes


def test_a_build_over_its_time_is_stopped_and_tags_nothing(
    docker_client: Any, build: Any, base_image: Callable[[str], str | None]
) -> None:
    marker = f"rs-slow-{uuid.uuid4().hex[:12]}"
    context, digest = context_tar(f"FROM debian:bookworm-slim\nRUN sleep 600 && echo {marker}\n")
    base_id = base_image("debian:bookworm-slim")
    assert base_id is not None
    started = time.monotonic()
    with pytest.raises(TaskImageError, match=r"took over 5s and was stopped"):
        build(context, digest, timeout_s=5.0)
    assert time.monotonic() - started < 30.0
    assert absent(docker_client, task_image_tag(digest, [base_id]))
    deadline = time.monotonic() + 30.0
    while (left := _build_leftovers(docker_client, marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"the stopped build still runs: {left}"


def test_the_base_images_are_configured_as_the_official_ones(
    docker_client: Any, base_image: Callable[[str], str | None]
) -> None:
    debian, python = base_image("debian:bookworm-slim"), base_image("python:3.11-slim")
    assert base_image("debian:12-slim") == debian
    assert base_image("python:3.11-slim-bookworm") == python
    assert base_image("alpine:3.19") is None
    started = time.monotonic()
    assert base_image("docker.io/library/python:3.11-slim") == python
    assert time.monotonic() - started < PRESENT_S
    debian_config = docker_client.images.get("debian:bookworm-slim").attrs["Config"]
    assert debian_config["Cmd"] == ["bash"]
    assert debian_config["Env"] == ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    assert not debian_config["WorkingDir"]
    assert not debian_config["User"]
    assert LABEL in debian_config["Labels"]
    python_config = docker_client.images.get("python:3.11-slim").attrs["Config"]
    assert python_config["Cmd"] == ["python3"]
    env = dict(e.split("=", 1) for e in python_config["Env"])
    assert env["PATH"].startswith("/usr/local/bin:")
    assert env["LANG"] == "C.UTF-8"
    assert env["PYTHON_VERSION"].startswith("3.11.")
    assert not python_config["WorkingDir"]
    assert not python_config["User"]
    probe = (
        "test ! -e /usr/lib/python3.11/EXTERNALLY-MANAGED && id -u && pwd && "
        "python --version && pip3.11 --version >/dev/null && test -x /usr/sbin/policy-rc.d && "
        "ls /etc/dpkg/dpkg.cfg.d /etc/apt/apt.conf.d | grep -c docker && "
        "python -c 'import ssl; print(len(ssl.create_default_context().get_ca_certs()) > 0)'"
    )
    assert run(docker_client, "python:3.11-slim", "bash", "-c", probe).split("\n") == [
        "0",
        "/",
        f"Python {env['PYTHON_VERSION']}",
        "6",
        "True",
    ]


def test_a_base_of_an_older_recipe_is_replaced_and_dropped(
    docker_client: Any, base_image: Callable[[str], str | None]
) -> None:
    current = base_image("debian:bookworm-slim")
    assert current is not None
    dockerfile = f"FROM debian:bookworm-slim\nLABEL {LABEL}=an-older-recipe\n"
    older, _ = docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag="debian:12-slim", rm=True)
    try:
        assert base_image("debian:12-slim") == current
        assert docker_client.images.get("debian:12-slim").id == current
        assert absent(docker_client, older.id)
    finally:
        docker_client.api.tag(current, "debian", "12-slim", force=True)
        if not absent(docker_client, older.id):
            docker_client.images.remove(older.id, force=True)
