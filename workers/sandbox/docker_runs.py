"""The docker backend's run paths: how one run reaches its program in a container and what comes back.

* ``entered``: through a pooled container's entry server (``docker_entry``): the run's fds handed over, no
  docker API call; the output pumped like the process backend's, the status from the supervisor.
* ``docker_exec``: a ``docker exec`` of the start shim, its files and stdin as a tar on the attached stream (the
  fallback when there is no entry server; its container is never reused).
* ``oneshot``: a container per run whose command is the run (benchmarks' ``docker run`` baseline).
A run's cpu time, OOM kills and memory peak are its container's cgroup figures (``cgroups``), measured from the
host before and after.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import socket
import struct
import tarfile
import time
from collections.abc import Callable
from typing import Any

from schemas.errors import SandboxError
from workers.sandbox.api import SandboxResult, SandboxSpec, SandboxStatus
from workers.sandbox.capture import Capture, start_marker
from workers.sandbox.cgroups import cpu_ns, listed_pids, oom_kills, peak_bytes, procs_file, reset_peak, usage_of
from workers.sandbox.common import base_env, check_relpath, error_result
from workers.sandbox.docker_config import ContainerConfig, Limits
from workers.sandbox.docker_entry import ENTRY_DEADLINES, EntryServer
from workers.sandbox.docker_pool import Container
from workers.sandbox.docker_reset import kill_run
from workers.sandbox.error_kinds import NOT_STARTED
from workers.sandbox.output_pump import Deadlines, Observed, RunClock, pump
from workers.sandbox.run_spec import encode_spec, memfd
from workers.sandbox.socket_watch import TcpQueueWatch, netns_of, own_netns, queue_limit

BACKEND = "docker"
_STDIN_FILE = "/tmp/.rs-stdin"  # noqa: S108 (inside the container's private tmpfs)
#: A ``docker exec`` or one-shot container: setup (the tar extraction) gets its own small allowance; running out
#: of time before the start marker is no verdict (the program never ran).
EXEC_DEADLINES = Deadlines(setup_s=5.0, drain_s=0.0, timeout_before_start=False)
_START = 'tar -x -f - -C / --no-same-permissions && exec 0<{stdin} && rm -f {stdin} && printf %s "$0" && exec "$@"'


class RunPaths:
    """The run paths of one backend (its docker API client and container config); thread-safe."""

    def __init__(self, api: Any, config: ContainerConfig) -> None:
        self._api = api
        self._config = config

    def docker_exec(self, container: Container, spec: SandboxSpec, archive: bytes) -> SandboxResult:
        """One run as a ``docker exec`` of the start shim (no entry server; its container is never reused)."""
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
        clock = RunClock(spec.timeout_s, time.monotonic(), EXEC_DEADLINES, usage_of(cg))
        stopped_for, started_at, ended_at = _talk(sock, archive, cap, clock)
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
            return error_result(BACKEND, f"{NOT_STARTED} (exit {exit_code_raw}): {cap.error_detail()}")
        return cap.result(
            BACKEND,
            stopped_for=stopped_for,
            returncode=exit_code_raw,
            started_at=started_at,
            ended_at=ended_at,
            oom_kills=oom,
            cpu_ms=cpu_ms,
            max_rss_kb=peak_kb,
            wait_ms=clock.host_wait_ms(),
            error=clock.contention(),
        )

    def entered(self, container: Container, entry: EntryServer, spec: SandboxSpec) -> SandboxResult:
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
                       cap=cap, deadlines=ENTRY_DEADLINES, watch=watch, usage=usage_of(cg))  # fmt: skip
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
            return error_result(BACKEND, f"{NOT_STARTED} (exit {returncode}): {cap.error_detail()}")
        if obs.stopped_for is None and returncode is None and oom == 0:
            # The supervisor (root, out of the program's reach) always reports; only the infrastructure
            # failing (the entry server or its container gone) loses the status.
            raise SandboxError("entry supervisor died without reporting a status")
        return cap.result(
            BACKEND,
            stopped_for=obs.stopped_for,
            returncode=returncode,
            started_at=obs.started_at,
            ended_at=obs.ended_at,
            oom_kills=oom,
            cpu_ms=cpu_ms,
            max_rss_kb=peak_kb,
            wait_ms=obs.host_wait_ms(),
            error=obs.contention(),
        )

    def oneshot(
        self, spec: SandboxSpec, image_for: Callable[[str], str], remove_soon: Callable[[str], None]
    ) -> SandboxResult:
        """The run as a container's own command (``DockerSandbox.run_oneshot``); the container is removed in
        background (``remove_soon``)."""
        t0 = time.monotonic()
        marker = start_marker()
        command = ["/bin/sh", "-c", _START.format(stdin=_STDIN_FILE), marker.decode(), *spec.argv]
        try:
            archive = archive_of(spec)
            limits = Limits.of(spec, image_for(spec.toolchain))
            cid = self._config.create(self._api, limits, command, {**base_env(), **spec.env}, oneshot=True)
        except Exception as exc:
            return error_result(BACKEND, f"{type(exc).__name__}: {exc}", (time.monotonic() - t0) * 1e3)
        try:
            sock = self._api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            cap = Capture(spec.output_limit_bytes, marker)
            # No cgroup to read before the container exists: the limit counts wall time (a one-shot run's).
            clock = RunClock(spec.timeout_s, time.monotonic(), EXEC_DEADLINES, None)
            stopped_for, started_at, ended_at = _talk(sock, archive, cap, clock, start=lambda: self._api.start(cid))
            if stopped_for is not None:
                with contextlib.suppress(Exception):
                    self._api.kill(cid)
            code = None if stopped_for is not None else self._api.wait(cid, timeout=10).get("StatusCode")
        except Exception as exc:
            return error_result(BACKEND, f"{type(exc).__name__}: {exc}", (time.monotonic() - t0) * 1e3)
        finally:
            remove_soon(cid)
        if started_at is None:
            return error_result(BACKEND, f"{NOT_STARTED} (exit {code}): {cap.error_detail()}")
        return cap.result(BACKEND, stopped_for=stopped_for, returncode=code, started_at=started_at, ended_at=ended_at)


def _talk(
    sock: Any, archive: bytes, cap: Capture, clock: RunClock, start: Callable[[], object] | None = None
) -> tuple[SandboxStatus | None, float | None, float | None]:
    """Start the run (``start``, unless it runs already), send it its files and stdin (``archive``) and pump its
    output (``_pump``); the attached socket is closed however that ends."""
    raw: socket.socket = sock._sock if hasattr(sock, "_sock") else sock
    try:
        if start is not None:
            start()
        clock.restart(time.monotonic())
        raw.sendall(archive)
        raw.shutdown(socket.SHUT_WR)
        return _pump(raw, cap, clock)
    finally:
        with contextlib.suppress(OSError):
            raw.close()
        with contextlib.suppress(Exception):
            sock.close()


def _pump(raw: socket.socket, cap: Capture, clock: RunClock) -> tuple[SandboxStatus | None, float | None, float | None]:
    """Demultiplex docker's stream frames with caps and the run's time limit; return (stop reason, start, end).

    docker copies stdout and stderr separately: a stderr frame written after the start marker can come before
    the marker's frame. A stderr overflow before the marker is therefore only an output limit once the marker
    arrives (it is printed before the program exists); until then stderr is dropped. No marker ever: the
    program never ran (no stop reason, no start)."""
    buf = bytearray()
    err_over = False
    while True:
        now = time.monotonic()
        stop, why = clock.stop_reason(now)
        if stop:
            return why, cap.started_at, now
        ready, _, _ = select.select([raw], [], [], max(0.0, clock.next_at - now))
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
            if cap.started_at is not None and clock.limit is None:
                clock.start(cap.started_at)


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


def archive_of(spec: SandboxSpec) -> bytes:
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
