"""The FROM lines a task's Dockerfile needs locally, and the content address of a task image."""

from __future__ import annotations

import contextlib
import io
import re
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.images.task_images import (
    RECIPE_VERSION,
    TaskImageError,
    dockerfile_bases,
    ensure_task_image,
    task_image_tag,
)

DIGEST = "ab" * 32


@pytest.mark.parametrize(
    ("dockerfile", "bases"),
    [
        ("FROM python:3.11-slim\nRUN pip install six\n", ["python:3.11-slim"]),
        ("from debian:bookworm-slim\n", ["debian:bookworm-slim"]),
        ("FROM --platform=linux/amd64 python:3.11-slim AS build\n", ["python:3.11-slim"]),
        ("FROM --platform=$BUILDPLATFORM python:3.11-slim\n", ["python:3.11-slim"]),
        (
            "FROM python:3.11-slim AS Build\nRUN make\nFROM debian:bookworm-slim\nCOPY --from=build /a /a\n",
            ["python:3.11-slim", "debian:bookworm-slim"],
        ),
        ("FROM python:3.11-slim AS base\nFROM base AS test\nFROM BASE\n", ["python:3.11-slim"]),
        ("FROM python:3.11-slim\nFROM python:3.11-slim\n", ["python:3.11-slim"]),
        ("FROM scratch\nCOPY a /a\n", []),
        ("# a comment\n\nFROM \\\n  python:3.11-slim \\\n  AS x\n", ["python:3.11-slim"]),
        ("FROM python:3.11-slim\nRUN echo \\\n# not an instruction\nFROM x\n", ["python:3.11-slim"]),
        ("# escape=`\nFROM `\n python:3.11-slim\n", ["python:3.11-slim"]),
        ("ARG V=1\nFROM python:3.11-slim\n", ["python:3.11-slim"]),
    ],
)
def test_the_bases_are_the_images_the_stages_start_from(dockerfile: str, bases: list[str]) -> None:
    assert dockerfile_bases(dockerfile) == bases


@pytest.mark.parametrize(
    ("dockerfile", "says"),
    [
        ("RUN true\n", "no FROM"),
        ("", "no FROM"),
        ("ARG BASE=python:3.11-slim\nFROM ${BASE}\n", "build argument"),
        ("ARG TAG\nFROM python:$TAG\n", "build argument"),
        ("FROM\n", "malformed FROM"),
        ("FROM a b\n", "malformed FROM"),
        ("FROM a AS\n", "malformed FROM"),
        ("FROM --pull=always python:3.11-slim\n", "unsupported FROM option"),
    ],
)
def test_a_dockerfile_without_a_literal_base_is_refused_saying_why(dockerfile: str, says: str) -> None:
    with pytest.raises(TaskImageError, match=says):
        dockerfile_bases(dockerfile)


@given(st.text())
def test_any_text_gives_bases_or_a_task_image_error(text: str) -> None:
    try:
        bases = dockerfile_bases(text)
    except TaskImageError:
        return
    assert all(base and "$" not in base and base != "scratch" for base in bases)


@given(st.lists(st.sampled_from(["FROM", "from", "AS", "$X", "\\", "\n", " ", "#", "--platform=p", "a:b", "scratch"])))
def test_dockerfile_like_text_gives_bases_or_a_task_image_error(words: list[str]) -> None:
    with contextlib.suppress(TaskImageError):
        dockerfile_bases(" ".join(words))


def test_the_tag_is_a_content_address_of_context_bases_and_recipe() -> None:
    tag = task_image_tag(DIGEST, ["sha256:" + "1" * 64])
    assert re.fullmatch(rf"rs-task/[0-9a-f]{{64}}:{RECIPE_VERSION}", tag)
    assert task_image_tag(DIGEST, ["sha256:" + "1" * 64]) == tag
    assert task_image_tag(DIGEST, ["sha256:" + "2" * 64]) != tag
    assert task_image_tag("cd" * 32, ["sha256:" + "1" * 64]) != tag
    assert task_image_tag(DIGEST, []) != tag
    assert task_image_tag(DIGEST, ["a", "b"]) != task_image_tag(DIGEST, ["b", "a"])


@pytest.mark.parametrize("digest", ["", "AB" * 32, "ab" * 31, "zz" * 32, "ab" * 32 + "\n"])
def test_a_context_digest_that_is_not_sha256_hex_is_a_value_error(digest: str) -> None:
    with pytest.raises(ValueError, match="64 lowercase hex"):
        task_image_tag(digest, [])


def context(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def no_base(name: str) -> str | None:
    del name
    return None


@pytest.mark.parametrize(
    ("tar", "says"),
    [
        (context({"app/Dockerfile": b"FROM python:3.11-slim\n"}), "no Dockerfile at its root"),
        (b"not a tar at all" * 64, "unreadable build context"),
        (context({"./Dockerfile": b"FROM ${BASE}\n"}), "build argument"),
        (context({"Dockerfile": b"FROM alpine:3.19\n"}), "base image alpine:3.19 is not available here"),
    ],
)
def test_a_context_that_cannot_be_built_here_is_refused_before_docker(tar: bytes, says: str, tmp_path: Path) -> None:
    with pytest.raises(TaskImageError, match=says) as caught:
        ensure_task_image(None, tar, DIGEST, build_timeout_s=1.0, base_image=no_base, lock_dir=tmp_path)
    assert f"task context {DIGEST}" in str(caught.value)
