"""The ``docker`` backend: locked-down containers, one run per container at a time, from a warm pool.

Its parts, one job each:

* ``docker_config``: how a container is made: ``network_mode=none``, read-only rootfs, tmpfs work dirs with
  size and inode caps, non-root uid, ``cap_drop=ALL``, ``no-new-privileges``, memory/cpu/pids limits, a custom
  seccomp profile, an idle init as pid 1 that is NOT dumpable (``INIT``): it runs as the sandbox uid and
  outlives the runs of a pooled container, so a run must not be able to read or write its memory or
  page-table state (``/proc/1/mem``, ``clear_refs``, ``pagemap``, ptrace).
* ``docker_pool``: the warm pool (creating a container costs hundreds of milliseconds), one per image and
  limits, refilled in background.
* ``docker_runs``: how a run enters a pooled container: through the container's entry server
  (``docker_entry``; default when the worker is root with ``nsenter`` and the container has no userns-remap or
  LSM label): a server started once per container in its namespaces forks per run a supervisor that joins the
  container's cgroups and a program entered exactly like a ``docker exec --user`` process (verified against
  the container's init per run), so a run costs no docker API call and no ``runc exec`` (~60 ms each).
  Otherwise (and always in the naive container-per-run mode, ``pool_size=0``) a run is one ``docker exec``.
* ``docker_reset``: after a clean run the container is reset FROM THE HOST, as root, with no docker API call:
  every process in the container's cgroup except its idle init is killed through a pidfd, the pids controller
  must be back to the init alone (no zombies), the writable mounts are emptied through ``/proc/<init>/root``
  with symlink-safe deletion, and SysV IPC objects are removed from the container's IPC namespace. Nothing
  inside the container takes part, so a leftover process of the previous run cannot interfere with its own
  reset.

A run that ended abnormally (timeout, output or memory limit) or a reset that cannot be verified discards the
container instead; a fresh one starts in background.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from schemas.errors import SandboxError
from schemas.settings import PYTHON_TOOLCHAIN, Settings
from workers.sandbox.admission import Admission
from workers.sandbox.api import SandboxResult, SandboxSpec, SandboxStatus
from workers.sandbox.audit import poll_until_empty
from workers.sandbox.cgroups import v1_memory_mounted
from workers.sandbox.common import error_result
from workers.sandbox.docker_config import ContainerConfig, Limits
from workers.sandbox.docker_entry import nsenter_path
from workers.sandbox.docker_pool import WarmPool
from workers.sandbox.docker_runs import BACKEND, RunPaths, archive_of
from workers.sandbox.error_kinds import ADMISSION, CLOSED, SLOTS
from workers.sandbox.fleet_pace import FleetPace
from workers.sandbox.seccomp import docker_profile


def _baked_image(settings: Settings, client: Any, family: str) -> str:
    """A toolchain family's image as the platform provides it (``settings.toolchain_image``); never built
    here. Missing is an infrastructure failure naming what to build."""
    tag = settings.toolchain_image(family)
    try:
        client.images.get(tag)
    except Exception as exc:  # docker.errors.ImageNotFound, or the daemon is unreachable
        raise SandboxError(
            f"image {tag} of toolchain {family!r} unavailable ({exc}): build it with "
            f"`rewardstream sandbox toolchains --build {family}`"
        ) from exc
    return tag


def docker_client(settings: Settings) -> Any:
    """A docker-py client for ``settings.sandbox.docker_host`` (default: the local socket), checked with a ping."""
    url = settings.sandbox.docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if url.startswith("unix://") and not os.path.exists(url.removeprefix("unix://")):
        # No daemon: said before a client is made, whose failed connect would leave its socket to the collector.
        raise SandboxError(f"docker daemon unreachable: no socket at {url.removeprefix('unix://')}")
    client = None
    try:
        import docker

        client = (
            docker.DockerClient(base_url=settings.sandbox.docker_host)
            if settings.sandbox.docker_host
            else docker.from_env()
        )
        client.ping()
    except Exception as exc:
        if client is not None:
            client.close()  # its connection pool holds the socket the failed ping opened
        raise SandboxError(f"docker daemon unreachable: {exc}") from exc
    return client


class DockerSandbox:
    """Thread-safe docker backend; ``pool_size=0`` is the naive container-per-run mode (for comparison)."""

    name = BACKEND

    def __init__(
        self,
        settings: Settings,
        client: Any,
        image: str,
        *,
        pool_size: int | None = None,
        entry: bool | None = None,
        toolchains: Callable[[str], str] | None = None,
        fleet: FleetPace | None = None,
    ) -> None:
        """``entry``: run pooled containers' programs through an entry server instead of ``docker exec``
        (default: whenever possible: a pool, root, ``nsenter``, no userns-remap, no AppArmor/SELinux label).
        ``image`` is the python family's; ``toolchains(family)`` gives another family's image (by default the
        tag the settings name, which must exist), asked the first time a run names that family. ``fleet``: the
        worker's share of the fleet's starts, if it has one."""
        self._client = client
        self._api = client.api
        self._images: dict[str, str] = {PYTHON_TOOLCHAIN: image}
        self._toolchains = toolchains or functools.partial(_baked_image, settings, client)
        self._image_lock = threading.Lock()
        owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._config = ContainerConfig(settings.sandbox.uid, docker_profile(), v1_memory_mounted(), owner, image)
        pool_size = settings.sandbox.pool_size if pool_size is None else pool_size
        nsenter = nsenter_path() if entry is not False and pool_size > 0 else None
        if entry and nsenter is None:
            raise SandboxError("docker entry server needs a warm pool, root and nsenter (Debian util-linux)")
        #: The warm containers (per image and limits) and their entry servers.
        self.pool = WarmPool(self._api, self._config, pool_size, nsenter)
        self._runs = RunPaths(self._api, self._config)
        self._admission = Admission.from_settings(settings, fleet)

    # ---- lifecycle -----------------------------------------------------------------------------------

    def _image_for(self, family: str) -> str:
        """The image of toolchain ``family``, looked up (or built, by the caller's ``toolchains``) once."""
        image = self._images.get(family)
        if image is not None:
            return image
        with self._image_lock:
            image = self._images.get(family)
            if image is None:
                image = self._images[family] = self._toolchains(family)
            return image

    def close(self) -> None:
        """Remove every container this instance created; idempotent."""
        self.pool.close()

    def audit(self, wait_s: float = 0.0) -> list[str]:
        """Leftovers: containers of ours neither pooled nor busy, and extra processes in pooled ones."""
        return poll_until_empty(self.pool.leftovers, wait_s)

    # ---- runs ----------------------------------------------------------------------------------------

    def run(self, spec: SandboxSpec) -> SandboxResult:
        """Run ``spec`` in a pristine container; infrastructure failures become ``sandbox_error``."""
        if self.pool.closed:
            return error_result(self.name, CLOSED)
        try:
            with self._admission.admit():
                return self._run(spec)
        except OSError as exc:  # the slot files: the host's fault
            return error_result(self.name, f"{SLOTS}: {type(exc).__name__}: {exc}")
        except SandboxError as exc:  # this worker may start nothing now (its fleet share is 0, or it is stopping)
            return error_result(self.name, f"{ADMISSION}: {exc}")

    def _run(self, spec: SandboxSpec) -> SandboxResult:
        t0 = time.monotonic()
        try:
            archive = archive_of(spec)
            container = self.pool.acquire(Limits.of(spec, self._image_for(spec.toolchain)))
        except Exception as exc:
            return error_result(self.name, f"{type(exc).__name__}: {exc}", (time.monotonic() - t0) * 1e3)
        reusable = False
        try:
            if container.entry is not None:
                result = self._runs.entered(container, container.entry, spec)
            else:
                result = self._runs.docker_exec(container, spec, archive)
            reusable = result.status in (SandboxStatus.OK, SandboxStatus.NONZERO_EXIT, SandboxStatus.CRASHED)
            # A docker exec'd run shares the container's network and IPC namespaces with every later run: such
            # a container is never reused (the pool refills in background).
            reusable = reusable and self.pool.size > 0 and container.entry is not None
            return result
        except Exception as exc:
            return error_result(self.name, f"{type(exc).__name__}: {exc}", (time.monotonic() - t0) * 1e3)
        finally:
            self.pool.release(container, reusable)

    def run_oneshot(self, spec: SandboxSpec) -> SandboxResult:
        """The most naive container per run, like ``docker run --rm -i``: the program (behind the same start
        shim) is the container's own command; same limits; no pool, no exec, no reset. For benchmarks: it
        measures no cpu or memory (the container's cgroup is gone when the exit code is known)."""
        if self.pool.closed:
            return error_result(self.name, CLOSED)
        return self._runs.oneshot(spec, self._image_for, self.pool.remove_soon)
