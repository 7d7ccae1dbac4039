"""One container of an image task on the docker backend, as a context manager: created from the task's image
with its resource class, locked down, removed whatever happens.

Why these settings: a Harbor task's commands run as root in their own image (``apt-get``, ``pip install``), so
the image's filesystem stays writable, but the container has no network, no capability beyond what root needs
for files and users, ``no-new-privileges``, docker's seccomp profile, and bounded memory, CPUs and pids.
Commands run with ``docker exec``; one past its timeout kills the container (what it wrote stays readable).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import posixpath
import re
import shlex
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping
from typing import IO, Any

from schemas.environments import TaskEnvironment
from schemas.errors import SandboxError
from workers.containers.executed import Captured, Ended, Executed, OutputOverError

LABEL = "rewardstream.image-task"
#: What root in an image task's container may still do: own, read, write and chmod files, switch users.
_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL"]
_PIDS_LIMIT = 4096
#: Seconds a host-side step (staging files, emptying a directory) may take.
_HOST_STEP_S = 120.0
#: Seconds between two looks at how much a running command has written (docker has no disk quota on overlay2
#: without project quotas, so the storage cap is watched, and a fast writer may pass it by about a second's worth).
_SIZE_CHECK_S = 1.0
#: Bytes of a command's output file read back, and characters of its tail kept (``output_tail``).
MAX_OUTPUT_BYTES = 1024 * 1024
OUTPUT_TAIL_CHARS = 4000
#: Entries of a directory ``read_files`` looks at.
_MAX_READ_ENTRIES = 64
_CHUNK_BYTES = 1 << 20
#: Go's FileMode bit of a directory, in the daemon's stat of a path.
GO_DIR = 1 << 31
#: How many symlinks a read follows (the kernel's own limit is 40).
_MAX_LINK_HOPS = 8
_IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")


def output_tail(data: bytes) -> str:
    """The end of a command's output, as text: what a person reads first."""
    return data.decode("utf-8", "replace")[-OUTPUT_TAIL_CHARS:]


def _read_frames(sock: Any, captured: Captured) -> None:
    """The command's multiplexed stdout and stderr from its exec socket, which is closed after (docker-py's
    own stream leaves it open)."""
    from docker.utils.socket import STDERR, STDOUT, frames_iter

    raw = getattr(sock, "_sock", None)  # a SocketIO forgets its socket when closed
    try:
        for stream, data in frames_iter(sock, tty=False):
            captured.add(data if stream == STDOUT else None, data if stream == STDERR else None)
    finally:
        sock.close()
        if raw is not None:
            raw.close()


class ContainerInfraError(SandboxError):
    """The docker daemon failed a step of the container's life: the host's problem, never the task's."""


class ContainerRun:
    """A started container of an image task; ``shell`` runs a command in it, ``put``/``get`` move tars."""

    def __init__(self, client: Any, container: Any, storage_bytes: int) -> None:
        self.client = client
        self.container = container
        self.storage_bytes = storage_bytes
        self.killed = False

    @property
    def image_id(self) -> str | None:
        """The id of the image this container was created from (``sha256:...``, as the daemon inspected it at
        creation): what ran, whatever the tag names later. None if the daemon did not say."""
        image = self.container.attrs.get("Image") if isinstance(self.container.attrs, dict) else None
        return image if isinstance(image, str) and _IMAGE_ID.fullmatch(image) else None

    def shell(self, script: str, *, timeout_s: float, cwd: str | None = None) -> Ended:
        """Run ``script`` under ``bash -c`` as root until it ends, runs past ``timeout_s`` or makes the container
        hold more than its storage (then the container is killed: later ``get`` calls still read its files).
        Its exit status is not the caller's business."""
        return self.run(["bash", "-c", script], timeout_s=timeout_s, cwd=cwd, output_cap=0).ended

    def run(self, argv: list[str], *, timeout_s: float, cwd: str | None, output_cap: int) -> Executed:
        """Run ``argv`` as root in ``cwd``, keeping the first ``output_cap`` bytes of its stdout and of its
        stderr, until it ends, runs past ``timeout_s`` or makes the container hold more than its storage (then
        the container is killed, as in ``shell``)."""
        if self.killed:
            raise ContainerInfraError("the container was killed by an earlier timeout")
        api = self.client.api
        try:
            exec_id = api.exec_create(self.container.id, argv, user="0", workdir=cwd)["Id"]
        except Exception as exc:
            raise ContainerInfraError(f"docker exec failed: {exc}") from exc
        captured = Captured(output_cap)
        done, over = threading.Event(), threading.Event()
        failure: list[BaseException] = []

        def _run() -> None:
            try:
                _read_frames(api.exec_start(exec_id, socket=True), captured)
            except OutputOverError:
                over.set()
                self.kill()
            except Exception as exc:  # the daemon's failure, read by the caller below
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=_run, name="image-task-step", daemon=True).start()
        ended = self._watch(done, timeout_s)
        done.wait(_HOST_STEP_S)  # a killed container ends the stream
        if over.is_set():
            ended = "output"
        if failure and ended == "finished":
            raise ContainerInfraError(f"docker exec failed: {failure[0]}")
        exit_code = None
        if ended == "finished":
            try:
                exit_code = api.exec_inspect(exec_id).get("ExitCode")
            except Exception as exc:
                raise ContainerInfraError(f"docker exec inspect failed: {exc}") from exc
        return Executed(ended, exit_code if isinstance(exit_code, int) else None, *captured.result())

    def _watch(self, done: threading.Event, timeout_s: float) -> Ended:
        """How the command ``done`` is set for ends: the container is killed past ``timeout_s`` or storage."""
        deadline = time.monotonic() + timeout_s
        while not done.wait(max(0.0, min(_SIZE_CHECK_S, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                self.kill()
                return "timeout"
            if self.written() > self.storage_bytes:
                self.kill()
                return "storage"
        if self.written() > self.storage_bytes:  # a writer faster than one look: over all the same
            self.kill()
            return "storage"
        return "finished"

    def stage(self, script: str) -> None:
        """Run a host-side step (staging files, emptying a directory): anything but finishing is the host's."""
        ended = self.shell(script, timeout_s=_HOST_STEP_S)
        if ended != "finished":
            raise ContainerInfraError(f"a staging step ended by {ended} ({_HOST_STEP_S:g} s allowed): {script!r}")

    def written(self) -> int:
        """Bytes the container has added to its image (docker's SizeRw)."""
        api = self.client.api
        try:  # docker-py's inspect_container cannot ask for sizes: the same endpoint with ?size=1
            info = api._result(api._get(api._url("/containers/{0}/json", self.container.id), params={"size": 1}), True)
        except Exception as exc:
            raise ContainerInfraError(f"docker inspect of the container's size failed: {exc}") from exc
        return int(info.get("SizeRw") or 0)

    def kill(self) -> None:
        """Stop every process of the container now."""
        self.killed = True
        with contextlib.suppress(Exception):
            self.container.kill()

    def put(self, path: str, tar: bytes) -> None:
        """Extract ``tar`` into the directory ``path`` (by the daemon, which keeps it inside the container)."""
        try:
            ok = self.container.put_archive(path, tar)
        except Exception as exc:
            raise ContainerInfraError(f"docker put_archive to {path} failed: {exc}") from exc
        if not ok:
            raise ContainerInfraError(f"docker put_archive to {path} failed")

    def replace_dir(self, path: str, tar: bytes) -> None:
        """Make the directory ``path`` hold exactly ``tar``'s entries (everything in it before is removed)."""
        quoted = shlex.quote(path)
        self.stage(f"mkdir -p -- {quoted} && find {quoted} -mindepth 1 -delete")
        self.put(path, tar)

    def read_files(self, directory: str, caps: Mapping[str, int], *, default_cap: int) -> dict[str, bytes]:
        """The regular files directly in ``directory`` (at most ``_MAX_READ_ENTRIES`` entries looked at), each
        cut to its cap in ``caps`` (by name) or ``default_cap``; {} if ``directory`` is not there."""
        out: dict[str, bytes] = {}
        top = posixpath.basename(directory.rstrip("/"))
        try:
            stream = self.get(directory)
        except ContainerInfraError as exc:
            if "404" in str(exc) or "Could not find" in str(exc):
                return out
            raise
        with stream, tarfile.open(fileobj=stream, mode="r|") as tar:
            for seen, member in enumerate(tar):
                if seen >= _MAX_READ_ENTRIES:
                    break
                if not member.isreg() or posixpath.dirname(member.name) != top:
                    continue
                name = posixpath.basename(member.name)
                source = tar.extractfile(member)
                out[name] = source.read(caps.get(name, default_cap)) if source is not None else b""
        return out

    def stat(self, path: str) -> dict[str, Any] | None:
        """What the daemon says of ``path`` in the container (``name``, ``size``, ``mode`` as Go's FileMode,
        ``mtime``, ``linkTarget``), or None if there is nothing there."""
        api = self.client.api
        try:  # docker-py has no call for HEAD /containers/{id}/archive: the endpoint itself
            res = api.head(api._url("/containers/{0}/archive", self.container.id), params={"path": path})
        except Exception as exc:
            raise ContainerInfraError(f"docker stat of {path} failed: {exc}") from exc
        if res.status_code == 404:
            return None
        header = res.headers.get("X-Docker-Container-Path-Stat")
        if res.status_code != 200 or header is None:
            raise ContainerInfraError(f"docker stat of {path} failed: HTTP {res.status_code}")
        stat: dict[str, Any] = json.loads(base64.b64decode(header))
        return stat

    def changes(self, max_bytes: int) -> list[dict[str, Any]] | None:
        """``docker diff``: each path the container added (Kind 1), changed (0) or deleted (2) from its image; None
        when the daemon's listing is over ``max_bytes`` (millions of empty files: read no further)."""
        api = self.client.api
        try:  # docker-py's diff reads the whole listing into memory: the endpoint itself, read to a cap
            res = api._get(api._url("/containers/{0}/changes", self.container.id), stream=True)
            try:
                api._raise_for_status(res)
                body = res.raw.read(max_bytes + 1, decode_content=True)
            finally:
                res.close()
            listing = None if len(body) > max_bytes else json.loads(body or b"null")
        except Exception as exc:
            raise ContainerInfraError(f"docker diff failed: {exc}") from exc
        return None if listing is None else list(listing or [])

    def write_file(self, path: str, data: bytes) -> str | None:
        """Write one file (mode 0644, root's) as the daemon extracts a tar: a link at ``path`` is replaced,
        links on the way are followed inside the container; a directory there refuses it."""
        found = self.stat(path)
        if found is not None and int(found.get("mode", 0)) & GO_DIR:
            return f"is a directory: {path}"
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        self.put("/", out.getvalue())
        return None

    def read_file(self, path: str, cap: int) -> tuple[bytes, int] | str:
        """The first ``cap`` bytes of a regular file and its size (following links inside the container, as
        ``cat`` would), or why not."""
        for _ in range(_MAX_LINK_HOPS):
            found = self.stat(path)
            if found is None:
                return f"no such file: {path}"
            target = found.get("linkTarget") or ""
            if not target:
                break
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        else:
            return f"too many symlinks from {path}"
        with self.get(path) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
            member = tar.next()
            if member is None or not member.isreg():
                return f"not a regular file: {path}"
            source = tar.extractfile(member)
            return (source.read(cap) if source is not None else b""), member.size

    def get(self, path: str) -> IO[bytes]:
        """A tar stream of ``path`` (its entries under ``path``'s base name), as the daemon sends it; closing it
        closes the daemon's connection, however much of it was read."""
        api = self.client.api
        try:  # docker-py's get_archive hides the response, whose connection a partly read stream must close
            res = api._get(api._url("/containers/{0}/archive", self.container.id), params={"path": path}, stream=True)
            api._raise_for_status(res)
        except Exception as exc:
            raise ContainerInfraError(f"docker get_archive of {path} failed: {exc}") from exc
        return _ResponseReader(res)


class _ResponseReader(io.BufferedReader):
    """The body of a streamed response as a file; ``close`` also closes the response."""

    def __init__(self, res: Any) -> None:
        super().__init__(_ChunkReader(res.iter_content(_CHUNK_BYTES)))
        self.res = res

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.res.close()


class _ChunkReader(io.RawIOBase):
    """A raw stream over the daemon's chunk iterator, for ``tarfile``'s stream mode (nothing read ahead)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = iter(chunks)
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.pending:
            chunk = next(self.chunks, None)
            if chunk is None:
                return 0
            self.pending = chunk
        size = min(len(buffer), len(self.pending))
        buffer[:size] = self.pending[:size]
        self.pending = self.pending[size:]
        return size


@contextlib.contextmanager
def container_run(
    client: Any, image: str, environment: TaskEnvironment, *, purpose: str, env: Mapping[str, str] = {}
) -> Iterator[ContainerRun]:
    """A started container of ``image`` with ``environment``'s resources and variables (``env`` on top),
    removed on exit."""
    try:
        container = client.containers.create(
            image,
            command=["sleep", "infinity"],
            entrypoint=[],
            user="0",
            working_dir=environment.workdir,
            environment={**environment.env, **env},
            network_mode="none",
            init=True,
            mem_limit=environment.memory_mb << 20,
            memswap_limit=environment.memory_mb << 20,
            nano_cpus=int(environment.cpus * 1e9),
            pids_limit=_PIDS_LIMIT,
            cap_drop=["ALL"],
            cap_add=_CAPABILITIES,
            security_opt=["no-new-privileges"],
            labels={LABEL: purpose},
            log_config={"type": "none", "config": {}},
        )
    except Exception as exc:
        raise ContainerInfraError(f"cannot create a container of {image}: {exc}") from exc
    try:
        try:
            container.start()
        except Exception as exc:
            raise ContainerInfraError(f"cannot start a container of {image}: {exc}") from exc
        yield ContainerRun(client, container, environment.storage_mb << 20)
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)
