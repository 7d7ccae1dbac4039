"""One run of the process backend: a fresh cgroup, the fork server handed the run's fds, the output pumped with
caps and a clock, the cgroup killed until the supervisor reports, the result assembled from what the parent saw."""

from __future__ import annotations

import os
import select
import time

from schemas.errors import SandboxError
from workers.sandbox.api import SandboxResult, SandboxSpec
from workers.sandbox.capture import Capture, start_marker
from workers.sandbox.cgroups import CgroupManager, CgroupStats, RunCgroup
from workers.sandbox.common import error_result
from workers.sandbox.error_kinds import NOT_STARTED
from workers.sandbox.fork_server import ForkServer
from workers.sandbox.output_pump import Deadlines, Observed, pump
from workers.sandbox.run_spec import encode_spec, memfd
from workers.sandbox.socket_watch import TcpQueueWatch, own_netns, queue_limit

BACKEND = "process"
#: bwrap and the fork server: the clock runs from the spawn until the start marker arrives, then from it.
#: setup_s: a loaded host may take seconds to fork and isolate a run; that is not the program's time.
_DEADLINES = Deadlines(setup_s=5.0, drain_s=1.0, timeout_before_start=True)
#: How long a killed run's supervisor may take to end before the fork server is restarted to end it.
_STATUS_WAIT_S = 10.0


def run_forked(spec: SandboxSpec, server: ForkServer, cgroups: CgroupManager, run_id: str) -> SandboxResult:
    """One run through the fork server: no host mounts; the run cgroup is the only host-side state."""
    if not spec.argv:
        raise SandboxError("spec.argv is empty")
    marker = start_marker()
    spec_fd = memfd("spec", encode_spec(spec, marker))
    group: RunCgroup | None = None
    try:
        stdin_fd = memfd("stdin", spec.stdin)
        try:
            group = cgroups.create(run_id, memory_bytes=spec.memory_mb << 20, pids=spec.pids_limit, cpus=spec.cpus)
            result = _execute(spec, server, group, (spec_fd, stdin_fd), marker)
        finally:
            os.close(stdin_fd)
    finally:
        os.close(spec_fd)
        if group is not None:
            group.destroy()
    return result


def _execute(
    spec: SandboxSpec,
    server: ForkServer,
    group: RunCgroup,
    inputs: tuple[int, int],
    marker: bytes,
) -> SandboxResult:
    cap = Capture(spec.output_limit_bytes, marker)
    mine: list[int] = []  # read ends, ours to close
    theirs: list[int] = []  # write ends and cgroup fds, handed to the fork server
    try:
        out_r, out_w = os.pipe()
        mine.append(out_r)
        theirs.append(out_w)
        err_r, err_w = os.pipe()
        mine.append(err_r)
        theirs.append(err_w)
        status_r, status_w = os.pipe()
        mine.append(status_r)
        theirs.append(status_w)
        procs = [os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in group.procs_files()]
        theirs += procs
        spawn_at = time.monotonic()
        try:
            server.launch([*inputs, out_w, err_w, status_w, *procs])
        finally:
            for fd in theirs:
                os.close(fd)
            theirs.clear()
        obs = pump(out_fd=out_r, err_fd=err_r, exit_fd=status_r, timeout_s=spec.timeout_s, spawn_at=spawn_at,
                   cap=cap, deadlines=_DEADLINES, watch=_tcp_watch(spec, group), usage=group.usage())  # fmt: skip
    finally:
        for fd in theirs:
            os.close(fd)
        group.kill_all()
    try:
        raw = _status_after_kill(status_r, group)
    finally:
        for fd in mine:
            os.close(fd)
    if raw is None:
        # The supervisor lives outside the run cgroup after every kill: the fork server's pid namespace is
        # the one thing left that ends it (and the runs in flight with it: an infrastructure failure).
        server.restart()
        raise SandboxError(f"the run's supervisor outlived {_STATUS_WAIT_S:.0f} s of kills; fork server restarted")
    stats = group.stats()
    returncode = int.from_bytes(raw, "big") if len(raw) == 4 else None
    if returncode is None and obs.stopped_for is None and stats.oom_kills == 0 and cap.started_at is not None:
        # The program's supervisor (root, outside the program's reach) died without a status: only the
        # fork server going away does that. The infrastructure's fault, never a verdict on the program.
        raise SandboxError("fork server supervisor died without reporting a status")
    return _result(returncode, obs, cap, stats, spawn_at)


def _result(
    returncode: int | None,
    obs: Observed,
    cap: Capture,
    stats: CgroupStats,
    spawn_at: float,
) -> SandboxResult:
    started = obs.started_at
    ended = obs.ended_at or time.monotonic()
    if started is None:
        # No start marker: the sandbox never reached the program, so nothing here is the program's doing.
        why = obs.stopped_for or f"exit {returncode}"
        detail = cap.error_detail()
        return error_result(BACKEND, f"{NOT_STARTED} ({why}): {detail}", (ended - spawn_at) * 1e3)
    if returncode is not None and returncode < 0:
        returncode = 128 - returncode  # killed by signal N (subprocess: -N): as bwrap reports it, 128 + N
    return cap.result(
        BACKEND,
        stopped_for=obs.stopped_for,
        returncode=returncode,
        started_at=started,
        ended_at=ended,
        oom_kills=stats.oom_kills,
        cpu_ms=stats.cpu_ms,
        max_rss_kb=stats.memory_peak_bytes // 1024,
        pids_limit_hit=stats.pids_limit_hits > 0,
        wait_ms=obs.host_wait_ms(),
        error=obs.contention(),
    )


def _tcp_watch(spec: SandboxSpec, group: RunCgroup) -> TcpQueueWatch:
    """The run's TCP queues, summed from outside while it runs (see ``socket_watch``)."""
    return TcpQueueWatch(group.pids, queue_limit(spec.memory_mb << 20), [own_netns()])


def _status_after_kill(status_r: int, group: RunCgroup) -> bytes | None:
    """The supervisor's status once the run is killed: 4 bytes, fewer if it died first, None if it never ends.

    The kill empties the run cgroup, but a supervisor the fork server forked late (a loaded host: the clock ran
    out before it joined) joins afterwards and would run the program unwatched, holding the pipe open forever.
    So the group is killed again until the pipe closes."""
    poller = select.poll()
    poller.register(status_r, select.POLLIN)
    data = b""
    end = time.monotonic() + _STATUS_WAIT_S
    while len(data) < 4:
        if not poller.poll(100):
            if time.monotonic() > end:
                return None
            group.kill_all()
            continue
        chunk = os.read(status_r, 4 - len(data))
        if not chunk:
            break
        data += chunk
    return data
