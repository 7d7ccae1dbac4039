"""The official base images a task's Dockerfile may name when images are sourced locally (no registry).

Why in the contracts: the local platform builds stand-ins of these from Debian packages, and the workers refuse
any other base at load naming these; both sides must agree on the names.
"""

from __future__ import annotations

#: Every name a local base answers to -> the canonical name of the recipe that builds it.
LOCAL_BASE_IMAGES: dict[str, str] = {
    "debian:bookworm-slim": "debian:bookworm-slim",
    "debian:12-slim": "debian:bookworm-slim",
    "python:3.11-slim": "python:3.11-slim",
    "python:3.11-slim-bookworm": "python:3.11-slim",
}
#: How Docker Hub's official images may also be written (``docker.io/library/python:3.11-slim``).
_OFFICIAL_PREFIXES = ("docker.io/library/", "index.docker.io/library/", "library/")


def local_base_name(ref: str) -> str | None:
    """The canonical local base ``ref`` names, or None when it names none of them."""
    return LOCAL_BASE_IMAGES.get(official_name(ref))


def official_name(ref: str) -> str:
    """``ref`` without a Docker Hub official-image prefix: the name a local image is tagged with."""
    for prefix in _OFFICIAL_PREFIXES:
        if ref.startswith(prefix):
            return ref.removeprefix(prefix)
    return ref
