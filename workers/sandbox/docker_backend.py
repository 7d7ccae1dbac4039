"""The ``docker`` backend: locked-down containers, one run per container at a time, from a warm pool.

Containers: ``network_mode=none``, read-only rootfs, tmpfs work dirs with size and inode caps, non-root uid,
``cap_drop=ALL``, ``no-new-privileges``, memory/cpu/pids limits, a custom seccomp profile, an idle init as pid
1 that is NOT dumpable (``docker_config.INIT``): it runs as the sandbox uid and outlives the runs of a pooled
container, so a run must not be able to read or write its memory or page-table state (``/proc/1/mem``,
``clear_refs``, ``pagemap``, ptrace). Why a pool with a verified reset: creating a container costs hundreds of
milliseconds.
How a run enters a pooled container: through the container's entry server (``docker_entry``; default when
the worker is root with ``nsenter`` and the container has no userns-remap or LSM label): a server started
once per container in its namespaces forks per run a supervisor that joins the container's cgroups and a
program entered exactly like a ``docker exec --user`` process (verified against the container's init per
run), so a run costs no docker API call and no ``runc exec`` (~60 ms each). Otherwise (and always in the
naive container-per-run mode, ``pool_size=0``) a run is one ``docker exec``.
After a clean run the container is reset FROM THE HOST, as root, with no docker API call: every process in
the container's cgroup except its idle init is killed through a pidfd, the pids controller must be back to
the init alone (no zombies), the writable mounts are emptied through ``/proc/<init>/root`` with symlink-safe
deletion, and SysV IPC objects are removed from the container's IPC namespace. Nothing inside the container
takes part, so a leftover process of the previous run cannot interfere with its own reset. A run that ended
abnormally (timeout, output or memory limit) or a reset that cannot be verified discards the container
instead; a fresh one starts in background.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import secrets
import select
import socket
import struct
import tarfile
import threading
import time
from collections.abc import Callable
from typing import Any

from schemas.errors import SandboxError
from schemas.settings import PYTHON_TOOLCHAIN, Settings
from workers.sandbox.api import SandboxResult, SandboxSpec, SandboxStatus
from workers.sandbox.audit import poll_until_empty
from workers.sandbox.capture import Capture, start_marker
from workers.sandbox.cgroups import (
    cpu_ns,
    listed_pids,
    oom_kills,
    peak_bytes,
    procs_file,
    reset_peak,
    v1_memory_mounted,
)
from workers.sandbox.common import base_env, check_relpath, error_result
from workers.sandbox.docker_config import (
    ContainerConfig,
    Limits,
)
from workers.sandbox.docker_entry import (
    ENTRY_DEADLINES,
    EntryServer,
    nsenter_path,
)
from workers.sandbox.docker_pool import Container, WarmPool
from workers.sandbox.docker_reset import kill_run
from workers.sandbox.output_pump import Observed, pump
from workers.sandbox.run_spec import encode_spec, memfd
from workers.sandbox.seccomp import docker_profile
from workers.sandbox.socket_watch import TcpQueueWatch, netns_of, own_netns, queue_limit

_STDIN_FILE = "/tmp/.rs-stdin"  # noqa: S108 (inside the container's private tmpfs)
_START = 'tar -x -f - -C / --no-same-permissions && exec 0<{stdin} && rm -f {stdin} && printf %s "$0" && exec "$@"'


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
    """A docker-py client for ``settings.docker_host`` (default: the local socket), checked with a ping."""
    try:
        import docker

        client = docker.DockerClient(base_url=settings.docker_host) if settings.docker_host else docker.from_env()
        client.ping()
    except Exception as exc:
        raise SandboxError(f"docker daemon unreachable: {exc}") from exc
    return client


class DockerSandbox:
    """Thread-safe docker backend; ``pool_size=0`` is the naive container-per-run mode (for comparison)."""

    name = "docker"

    def __init__(
        self,
        settings: Settings,
        client: Any,
        image: str,
        *,
        pool_size: int | None = None,
        entry: bool | None = None,
        toolchains: Callable[[str], str] | None = None,
    ) -> None:
        """``entry``: run pooled containers' programs through an entry server instead of ``docker exec``
        (default: whenever possible: a pool, root, ``nsenter``, no userns-remap, no AppArmor/SELinux label).
        ``image`` is the python family's; ``toolchains(family)`` gives another family's image (by default the
        tag the settings name, which must exist), asked the first time a run names that family."""
        self._client = client
        self._api = client.api
        self._images: dict[str, str] = {PYTHON_TOOLCHAIN: image}
        self._toolchains = toolchains or functools.partial(_baked_image, settings, client)
        self._image_lock = threading.Lock()
        owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._config = ContainerConfig(settings.sandbox_uid, docker_profile(), v1_memory_mounted(), owner, image)
        pool_size = settings.sandbox_pool_size if pool_size is None else pool_size
        nsenter = nsenter_path() if entry is not False and pool_size > 0 else None
        if entry and nsenter is None:
            raise SandboxError("docker entry server needs a warm pool, root and nsenter (Debian util-linux)")
        #: The warm containers (per image and limits) and their entry servers.
        self.pool = WarmPool(self._api, self._config, pool_size, nsenter)

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
        t0 = time.monotonic()
        if self.pool.closed:
            return error_result(self.name, "sandbox is closed")
        try:
            archive = _archive(spec)
            container = self.pool.acquire(Limits.of(spec, self._image_for(spec.toolchain)))
        except Exception as exc:
            return error_result(self.name, f"{type(exc).__name__}: {exc}", (time.monotonic() - t0) * 1e3)
        reusable = False
        try:
            if container.entry is not None:
                result = self._run_entered(container, container.entry, spec)
            else:
                result = self._run_in(container, spec, archive)
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
        t0 = time.monotonic()
        if self.pool.closed:
            return error_result(self.name, "sandbox is closed")
        marker = start_marker()
        command = ["/bin/sh", "-c", _START.format(stdin=_STDIN_FILE), marker.decode(), *spec.argv]
        try:
            archive = _archive(spec)
            limits = Limits.of(spec, self._image_for(spec.toolchain))
            cid = self._config.create(self._api, limits, command, {**base_env(), **spec.env}, oneshot=True)
        except Exception as exc:
            return error_result(self.name, f"{type(exc).__name__}: {exc}", (time.monotonic() - t0) * 1e3)
        try:
            sock = self._api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            cap = Capture(spec.output_limit_bytes, marker)
            stopped_for, started_at, ended_at = _talk(sock, archive, spec, cap, start=lambda: self._api.start(cid))
            if stopped_for is not None:
                with contextlib.suppress(Exception):
                    self._api.kill(cid)
            code = None if stopped_for is not None else self._api.wait(cid, timeout=10).get("StatusCode")
        except Exception as exc:
            return error_result(self.name, f"{type(exc).__name__}: {exc}", (time.monotonic() - t0) * 1e3)
        finally:
            self.pool.remove_soon(cid)
        if started_at is None:
            return error_result(self.name, f"sandbox did not start (exit {code}): {cap.error_detail()}")
        return cap.result(self.name, stopped_for=stopped_for, returncode=code, started_at=started_at, ended_at=ended_at)

    def _run_in(self, container: Container, spec: SandboxSpec, archive: bytes) -> SandboxResult:
        cg = container.cgroup
        reset_peak(cg)
        cpu0, oom0 = cpu_ns(cg, lenient=True), oom_kills(cg, lenient=True)
        marker = start_marker()
        env = {**base_env(), **spec.env}
        start = _START.format(stdin=_STDIN_FILE)
        exec_id = self._api.exec_create(
            container.cid,
            ["/bin/sh", "-c", start, marker.decode(), *spec.argv],
            stdin=True,
            stdout=True,
            stderr=True,
            user=f"{self._config.uid}:{self._config.uid}",
            workdir="/work",
            environment=env,
        )["Id"]
        sock = self._api.exec_start(exec_id, socket=True)
        cap = Capture(spec.output_limit_bytes, marker)
        stopped_for, started_at, ended_at = _talk(sock, archive, spec, cap)
        # Measure before any kill: a killed container's cgroup disappears with it.
        cpu_ms = max(0, cpu_ns(cg, lenient=True) - cpu0) / 1e6
        oom = max(0, oom_kills(cg, lenient=True) - oom0)
        peak_kb = peak_bytes(cg, lenient=True) // 1024
        if stopped_for is not None:
            # The exec cannot be killed by itself: the whole container goes (it is never reused).
            with contextlib.suppress(Exception):
                self._api.kill(container.cid)
        # A stopped run's container is gone with its exec; its exit code is irrelevant anyway.
        exit_code_raw = None if stopped_for is not None else self._api.exec_inspect(exec_id).get("ExitCode")
        if started_at is None:
            return error_result(self.name, f"sandbox did not start (exit {exit_code_raw}): {cap.error_detail()}")
        return cap.result(
            self.name,
            stopped_for=stopped_for,
            returncode=exit_code_raw,
            started_at=started_at,
            ended_at=ended_at,
            oom_kills=oom,
            cpu_ms=cpu_ms,
            max_rss_kb=peak_kb,
        )

    def _run_entered(self, container: Container, entry: EntryServer, spec: SandboxSpec) -> SandboxResult:
        """One run through the container's entry server: no docker API call, no ``runc exec``."""
        if not spec.argv:
            raise SandboxError("spec.argv is empty")
        cg = container.cgroup
        reset_peak(cg)
        cpu0, oom0 = cpu_ns(cg, lenient=True), oom_kills(cg, lenient=True)
        marker = start_marker()
        cap = Capture(spec.output_limit_bytes, marker)
        mine: list[int] = []  # read ends, ours to close
        theirs: list[int] = []  # what the entry server's supervisor gets
        try:
            theirs.append(memfd("spec", encode_spec(spec, marker)))
            theirs.append(memfd("stdin", spec.stdin))
            for _ in range(3):  # stdout, stderr, status
                r, w = os.pipe()
                mine.append(r)
                theirs.append(w)
            spawn_at = time.monotonic()
            try:
                entry.launch(theirs)
            finally:
                for fd in theirs:
                    os.close(fd)
                theirs.clear()
            watch = TcpQueueWatch(
                lambda: listed_pids(procs_file(cg)),
                queue_limit(spec.memory_mb << 20),
                [own_netns(), netns_of(container.init_pid)],
            )
            obs = pump(out_fd=mine[0], err_fd=mine[1], exit_fd=mine[2], timeout_s=spec.timeout_s, spawn_at=spawn_at,
                       cap=cap, deadlines=ENTRY_DEADLINES, watch=watch)  # fmt: skip
            raw = _read_status(mine[2], 2.0) if obs.exited else b""
            if len(raw) != 4:
                # Stopped (timeout, output limit, no start) or the supervisor died (OOM-killed): kill the run
                # from the host right now; the container is not reused (the caller discards it).
                kill_run(cg, container.init_pid)
        finally:
            for fd in (*theirs, *mine):
                os.close(fd)
        cpu_ms = max(0, cpu_ns(cg, lenient=True) - cpu0) / 1e6
        oom = max(0, oom_kills(cg, lenient=True) - oom0)
        peak_kb = peak_bytes(cg, lenient=True) // 1024
        returncode = int.from_bytes(raw, "big") if len(raw) == 4 else None
        return self._entered_result(obs, cap, returncode, cpu_ms=cpu_ms, oom=oom, peak_kb=peak_kb)

    def _entered_result(
        self, obs: Observed, cap: Capture, returncode: int | None, *, cpu_ms: float, oom: int, peak_kb: int
    ) -> SandboxResult:
        if obs.started_at is None:
            return error_result(self.name, f"sandbox did not start (exit {returncode}): {cap.error_detail()}")
        if obs.stopped_for is None and returncode is None and oom == 0:
            # The supervisor (root, out of the program's reach) always reports; only the infrastructure
            # failing (the entry server or its container gone) loses the status.
            raise SandboxError("entry supervisor died without reporting a status")
        return cap.result(
            self.name,
            stopped_for=obs.stopped_for,
            returncode=returncode,
            started_at=obs.started_at,
            ended_at=obs.ended_at,
            oom_kills=oom,
            cpu_ms=cpu_ms,
            max_rss_kb=peak_kb,
        )


def _talk(
    sock: Any, archive: bytes, spec: SandboxSpec, cap: Capture, start: Callable[[], object] | None = None
) -> tuple[SandboxStatus | None, float | None, float | None]:
    """Start the run (``start``, unless it runs already), send it its files and stdin (``archive``) and pump its
    output (``_pump``); the attached socket is closed however that ends."""
    raw: socket.socket = sock._sock if hasattr(sock, "_sock") else sock
    try:
        if start is not None:
            start()
        spawn_at = time.monotonic()
        raw.sendall(archive)
        raw.shutdown(socket.SHUT_WR)
        return _pump(raw, spec, cap, spawn_at)
    finally:
        with contextlib.suppress(OSError):
            raw.close()
        with contextlib.suppress(Exception):
            sock.close()


def _pump(
    raw: socket.socket, spec: SandboxSpec, cap: Capture, spawn_at: float
) -> tuple[SandboxStatus | None, float | None, float | None]:
    """Demultiplex docker's stream frames with caps and a deadline; return (stop reason, start, end).

    docker copies stdout and stderr separately: a stderr frame written after the start marker can come before
    the marker's frame. A stderr overflow before the marker is therefore only an output limit once the marker
    arrives (it is printed before the program exists); until then stderr is dropped. No marker ever: the
    program never ran (no stop reason, no start)."""
    buf = bytearray()
    deadline = spawn_at + spec.timeout_s + 5.0  # setup (tar extraction) gets its own small allowance
    err_over = False
    while True:
        now = time.monotonic()
        if now >= deadline:
            return (SandboxStatus.TIMEOUT if cap.started_at else None), cap.started_at, now
        ready, _, _ = select.select([raw], [], [], deadline - now)
        chunk = raw.recv(1 << 16) if ready else None
        if chunk == b"":
            return None, cap.started_at, time.monotonic()
        buf += chunk or b""
        for kind, payload in _frames(buf):
            which = "out" if kind == 1 else "err"
            if which == "err" and err_over:
                continue
            if not cap.feed(which, payload):
                if cap.bad_start:
                    return None, None, time.monotonic()
                if cap.started_at is None:  # stderr, before the marker's frame
                    err_over = True
                    continue
                return SandboxStatus.OUTPUT_LIMIT, cap.started_at, time.monotonic()
            if cap.started_at is not None and err_over:
                return SandboxStatus.OUTPUT_LIMIT, cap.started_at, time.monotonic()
            if cap.started_at is not None and deadline > cap.started_at + spec.timeout_s:
                deadline = cap.started_at + spec.timeout_s


def _frames(buf: bytearray) -> list[tuple[int, bytes]]:
    """Pop every complete ``[kind, 0, 0, 0, size32] payload`` frame from ``buf``."""
    out: list[tuple[int, bytes]] = []
    while len(buf) >= 8:
        kind, size = buf[0], struct.unpack(">I", buf[4:8])[0]
        if len(buf) < 8 + size:
            break
        out.append((kind, bytes(buf[8 : 8 + size])))
        del buf[: 8 + size]
    return out


def _archive(spec: SandboxSpec) -> bytes:
    """The tar that the start shim extracts at / : the files under work/, stdin as a private tmp file."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        dirs: set[str] = set()
        for name, data in spec.files.items():
            rel = check_relpath(name)
            for parent in reversed(list(rel.parents)[:-1]):
                key = f"work/{parent}"
                if key not in dirs:
                    dirs.add(key)
                    info = tarfile.TarInfo(key)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            info = tarfile.TarInfo(f"work/{rel}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(_STDIN_FILE.lstrip("/"))
        info.size, info.mode = len(spec.stdin), 0o600
        tar.addfile(info, io.BytesIO(spec.stdin))
    return out.getvalue()


def _read_status(fd: int, wait_s: float) -> bytes:
    """The supervisor's 4-byte status if it is (or within ``wait_s`` becomes) readable, else b''."""
    data = b""
    end = time.monotonic() + wait_s
    while len(data) < 4:
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 4 - len(data))
        if not chunk:
            break
        data += chunk
    return data
