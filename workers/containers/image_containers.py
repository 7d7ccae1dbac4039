"""One container of an image task on the docker backend, as a context manager: created from the task's image
with its resource class, locked down, removed whatever happens.

Why these settings: a Harbor task's commands run as root in their own image (``apt-get``, ``pip install``), so
the image's filesystem stays writable, but the container has no network, no capability beyond what root needs
for files and users, ``no-new-privileges``, docker's seccomp profile, and bounded memory, CPUs and pids.
Commands run with ``docker exec``; one past its timeout kills the container (what it wrote stays readable).
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import shlex
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping
from typing import IO, Any, Literal

from schemas.environments import TaskEnvironment
from schemas.errors import SandboxError

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


def output_tail(data: bytes) -> str:
    """The end of a command's output, as text: what a person reads first."""
    return data.decode("utf-8", "replace")[-OUTPUT_TAIL_CHARS:]


#: How a command in the container ended: on its own, past its timeout, or over the container's storage.
Ended = Literal["finished", "timeout", "storage"]


class ContainerInfraError(SandboxError):
    """The docker daemon failed a step of the container's life: the host's problem, never the task's."""


class ContainerRun:
    """A started container of an image task; ``shell`` runs a command in it, ``put``/``get`` move tars."""

    def __init__(self, client: Any, container: Any, storage_bytes: int) -> None:
        self.client = client
        self.container = container
        self.storage_bytes = storage_bytes
        self.killed = False

    def shell(self, script: str, *, timeout_s: float, cwd: str | None = None) -> Ended:
        """Run ``script`` under ``bash -c`` as root until it ends, runs past ``timeout_s`` or makes the container
        hold more than its storage (then the container is killed: later ``get`` calls still read its files).
        Its exit status is not the caller's business."""
        if self.killed:
            raise ContainerInfraError("the container was killed by an earlier timeout")
        api = self.client.api
        try:
            exec_id = api.exec_create(self.container.id, ["bash", "-c", script], user="0", workdir=cwd)["Id"]
        except Exception as exc:
            raise ContainerInfraError(f"docker exec failed: {exc}") from exc
        done = threading.Event()
        failure: list[BaseException] = []

        def _run() -> None:
            try:
                api.exec_start(exec_id, detach=False)
            except Exception as exc:  # the daemon's failure, read by the caller below
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=_run, name="image-task-exec", daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not done.wait(max(0.0, min(_SIZE_CHECK_S, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                self.kill()
                return "timeout"
            if self.written() > self.storage_bytes:
                self.kill()
                return "storage"
        if failure:
            raise ContainerInfraError(f"docker exec failed: {failure[0]}")
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
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for seen, member in enumerate(tar):
                if seen >= _MAX_READ_ENTRIES:
                    break
                if not member.isreg() or posixpath.dirname(member.name) != top:
                    continue
                name = posixpath.basename(member.name)
                source = tar.extractfile(member)
                out[name] = source.read(caps.get(name, default_cap)) if source is not None else b""
        return out

    def get(self, path: str) -> IO[bytes]:
        """A tar stream of ``path`` (its entries under ``path``'s base name), as the daemon sends it."""
        try:
            bits, _ = self.container.get_archive(path)
        except Exception as exc:
            raise ContainerInfraError(f"docker get_archive of {path} failed: {exc}") from exc
        return io.BufferedReader(_ChunkReader(bits))


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
