"""A Harbor task's container image: built once per host from its ``environment/`` context, never pulled.

The image's tag is a content address (the context's digest, the base images' ids, ``RECIPE_VERSION``), so a
second load of the same task builds nothing and a changed base builds anew. The build alone gets the host's
network (dockerd runs without a bridge here, and a Dockerfile's ``apt-get``/``pip install`` needs the package
registries); every run of the image is ``--network none``.

Why the build request is made by hand rather than with docker-py's ``APIClient.build``: that call hides the
HTTP response, and a build is stopped at its deadline by closing that connection (dockerd cancels a classic
build whose client went away, killing the RUN step's container), so the response must be in hand.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import socket
import tarfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.base_images import LOCAL_BASE_IMAGES
from schemas.errors import SandboxError, exception_line
from workers.images.dockerfile import TaskImageError, dockerfile_bases
from workers.images.trim_git import ERROR_MARK, MARK, trim_context, trimmed_refs

__all__ = [
    "BuiltImage",
    "TaskImageError",
    "dockerfile_bases",
    "ensure_prebuilt_image",
    "ensure_task_image",
    "task_image_tag",
]

#: Bump when the way a task image is made changes (build options, labels): every task image is then rebuilt.
RECIPE_VERSION = 2  # 2: repositories in WORKDIR keep only HEAD's history (trim_git)
REPOSITORY = "rs-task"
CONTEXT_LABEL = "rewardstream.task-context"
#: How much of a failed build's output its error keeps.
TAIL_LINES = 5
TAIL_LINE_CHARS = 300
#: The read timeout past the build's own deadline: the deadline's watchdog, not the socket, ends a silent build.
_READ_SLACK_S = 30.0
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class BuiltImage:
    """A task image present on this host; ``built`` is False when it already was."""

    tag: str
    image_id: str
    built: bool
    seconds: float
    trimmed: tuple[str, ...] = ()


def task_image_tag(context_sha256: str, base_ids: Sequence[str]) -> str:
    """``rs-task/<digest>:<RECIPE_VERSION>``, the digest over the context, the base image ids and the recipe."""
    if not _SHA256_HEX.fullmatch(context_sha256):
        raise ValueError(f"context digest {context_sha256!r} is not 64 lowercase hex digits")
    address = json.dumps({"context": context_sha256, "bases": list(base_ids), "recipe": RECIPE_VERSION})
    return f"{REPOSITORY}/{hashlib.sha256(address.encode()).hexdigest()}:{RECIPE_VERSION}"


def ensure_task_image(
    client: Any,
    context_tar: bytes,
    context_sha256: str,
    *,
    build_timeout_s: float,
    base_image: Callable[[str], str | None],
    lock_dir: Path,
    workdir: str | None = None,
) -> BuiltImage:
    """The task image of ``context_tar`` (an uncompressed tar whose root holds the Dockerfile), built unless
    present. ``base_image(name)`` gives a base's local id (building it when it is a known local base) or None.
    Raises TaskImageError naming the context digest: an unusable Dockerfile, a base not to be had here, a
    failed build (with its last lines) or one over ``build_timeout_s`` (stopped; nothing tagged). With
    ``workdir``, its repositories keep only HEAD's history (``trim_git``): ``trimmed`` names what went."""
    started = time.monotonic()
    where = f"task context {context_sha256}"
    try:
        bases = dockerfile_bases(_dockerfile(context_tar))
    except TaskImageError as exc:
        raise TaskImageError(f"{where}: {exc.message}") from exc
    base_ids = []
    for name in bases:
        image_id = base_image(name)
        if image_id is None:
            raise TaskImageError(
                f"{where}: base image {name} is not available here (no registry); "
                f"known local bases: {', '.join(sorted(LOCAL_BASE_IMAGES))}"
            )
        base_ids.append(image_id)
    tag = task_image_tag(context_sha256, base_ids)
    with _locked(lock_dir / f"{tag.split('/')[1].split(':')[0]}.lock"):
        present = _local_id(client, tag)
        if present is not None:
            return BuiltImage(tag, present, built=False, seconds=time.monotonic() - started)
        labels = {CONTEXT_LABEL: context_sha256}
        if workdir is None:
            _build(client, context_tar, tag, labels=labels, timeout_s=build_timeout_s, where=where)
            trimmed: list[str] = []
        else:
            trimmed = _build_trimmed(client, context_tar, tag, labels, build_timeout_s - (time.monotonic() - started),
                                     where=where, workdir=workdir)  # fmt: skip
        built = _local_id(client, tag)
    if built is None:
        raise TaskImageError(f"{where}: the build ended without tagging {tag}")
    return BuiltImage(tag, built, built=True, seconds=time.monotonic() - started, trimmed=tuple(trimmed))


def _build_trimmed(
    client: Any, context_tar: bytes, tag: str, labels: dict[str, str], timeout_s: float, *, where: str, workdir: str
) -> list[str]:
    """The task's own build, then the trimming step ``FROM`` it as ``tag``; the refs it removed."""
    started = time.monotonic()
    untrimmed = f"{tag}-untrimmed"
    _build(client, context_tar, untrimmed, labels=labels, timeout_s=timeout_s, where=where)
    try:
        image = client.images.get(untrimmed)
        user = str((image.attrs.get("Config") or {}).get("User") or "")
        context = trim_context(str(image.id), workdir, user)
        output = _build(client, context, tag, labels=labels, timeout_s=timeout_s - (time.monotonic() - started),
                        where=where)  # fmt: skip
    finally:
        with contextlib.suppress(Exception):
            client.images.remove(untrimmed, noprune=True)
    return trimmed_refs(output.lines)


def ensure_prebuilt_image(client: Any, ref: str, may_pull: bool) -> str:
    """The id of a task's prebuilt ``docker_image``: the local one, else pulled when ``may_pull``."""
    present = _local_id(client, ref)
    if present is not None:
        return present
    if not may_pull:
        raise TaskImageError(
            f"image {ref} is not present and images are sourced locally: `docker load` it on this host, "
            "or give the task an environment/Dockerfile"
        )
    try:
        return str(client.images.pull(ref).id)
    except Exception as exc:
        raise TaskImageError(f"pulling image {ref} failed: {exception_line(exc)}") from exc


def _dockerfile(context_tar: bytes) -> str:
    """The text of the ``Dockerfile`` at the root of the context tar."""
    try:
        with tarfile.open(fileobj=io.BytesIO(context_tar), mode="r:") as tar:
            for member in tar:
                if member.isfile() and os.path.normpath(member.name) == "Dockerfile":
                    data = tar.extractfile(member)
                    if data is not None:
                        return data.read().decode("utf-8")
    except (tarfile.TarError, UnicodeDecodeError) as exc:
        raise TaskImageError(f"unreadable build context: {exception_line(exc)}") from exc
    raise TaskImageError("the build context has no Dockerfile at its root")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder per task image across processes on this host."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _local_id(client: Any, ref: str) -> str | None:
    try:
        return str(client.images.get(ref).id)
    except Exception as exc:  # docker.errors.ImageNotFound; docker is optional at import time
        if type(exc).__name__ == "ImageNotFound":
            return None
        raise SandboxError(f"docker: cannot inspect image {ref}: {exception_line(exc)}") from exc


class _BuildOutput:
    """What a build said: its last lines, its error if it failed."""

    def __init__(self) -> None:
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.lines: list[str] = []  # the marked ones (``trim_git``), every one
        self.error: str | None = None

    def add(self, message: dict[str, Any]) -> None:
        for line in str(message.get("stream", "")).splitlines():
            if line.strip():
                self.tail.append(line.strip()[:TAIL_LINE_CHARS])
            if MARK in line or ERROR_MARK in line:
                self.lines.append(line.strip()[:TAIL_LINE_CHARS])
        if "error" in message:
            self.error = str(message["error"]).strip()
            self.tail.append(self.error[:TAIL_LINE_CHARS])

    def last_lines(self) -> str:
        return " | ".join(self.tail) or "no output"


def _build(
    client: Any, context_tar: bytes, tag: str, *, labels: dict[str, str], timeout_s: float, where: str
) -> _BuildOutput:
    """``docker build`` (classic builder) of the context as ``tag``, stopped at ``timeout_s``."""
    api = client.api
    params = {
        "t": tag,
        "rm": "1",
        "forcerm": "1",  # no container of a failed step stays behind
        "networkmode": "host",
        "labels": json.dumps(labels),
    }  # no "pull": a base is never pulled
    try:
        response = api.post(
            f"{api.base_url}/v{api.api_version}/build",
            params=params,
            data=context_tar,
            headers={"Content-Type": "application/x-tar"},
            stream=True,
            timeout=timeout_s + _READ_SLACK_S,
        )
    except Exception as exc:
        raise SandboxError(f"docker build request failed: {exception_line(exc)}") from exc
    output = _BuildOutput()
    stopped = threading.Event()
    watchdog = threading.Timer(timeout_s, _cut, args=(response, stopped))
    watchdog.start()
    try:
        if response.status_code != 200:
            raise TaskImageError(f"{where}: docker refused the build: {response.text.strip()}")
        _read(response, output)
    except TaskImageError:
        raise
    except Exception as exc:
        if not stopped.is_set():
            raise TaskImageError(f"{where}: the build's stream broke: {exception_line(exc)}") from exc
    finally:
        watchdog.cancel()
        response.close()
    if stopped.is_set():
        raise TaskImageError(
            f"{where}: the image build took over {timeout_s:g}s and was stopped; last output: {output.last_lines()}"
        )
    if output.error is not None:
        refused = [line.split(ERROR_MARK, 1)[1].strip() for line in output.lines if ERROR_MARK in line]
        raise TaskImageError(f"{where}: {refused[0]}" if refused else f"{where}: the image build failed: "
                             f"{output.last_lines()}")  # fmt: skip
    return output


def _read(response: Any, output: _BuildOutput) -> None:
    """Feed the build's JSON messages (one per line) to ``output`` until the stream ends."""
    pending = b""
    for chunk in response.iter_content(chunk_size=None):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                output.add(json.loads(line))
    if pending.strip():
        output.add(json.loads(pending))


def _cut(response: Any, stopped: threading.Event) -> None:
    """The deadline: shut the build's connection down, which makes dockerd cancel the build."""
    stopped.set()
    connection = getattr(response.raw, "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is None:
        response.close()
        return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
