"""The one output pump of every sandbox path that ends with a readable "exit" fd (a pidfd, a status pipe).

Pumps stdout/stderr into a ``Capture`` (caps, start marker) until the exit fd fires and the output drained,
the clock runs out or output overflows. What differs between backends is only the ``Deadlines`` policy.
"""

from __future__ import annotations

import os
import select
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass

from workers.sandbox.api import SandboxStatus
from workers.sandbox.capture import Capture

_READ_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class Deadlines:
    """When a run is stopped for time. Once the start marker arrived, every backend allows ``timeout_s`` from
    the program's start (the marker), not from the spawn.

    ``setup_s``: allowance on top of ``timeout_s`` from the spawn until the marker arrives.
    ``drain_s``: how long output may still arrive after the exit fd fired.
    ``timeout_before_start``: running out of time before the marker is reported as ``TIMEOUT`` (else as no
    stop reason at all: the caller turns a run that never started into a ``sandbox_error`` either way).
    """

    setup_s: float
    drain_s: float
    timeout_before_start: bool


@dataclass(slots=True)
class Observed:
    """What the worker saw of one run."""

    stopped_for: SandboxStatus | None = None
    exited: bool = False
    started_at: float | None = None
    ended_at: float | None = None


def _take_waiting_marker(out_fd: int, cap: Capture) -> None:
    """stderr overflowed before the start marker was read from stdout. The marker is written (one write, less
    than a pipe buffer) before the program exists, so if the program wrote that stderr, its marker is waiting
    on stdout: take it now (only it, never more), without blocking, so that the overflow is the program's."""
    poller = select.poll()
    poller.register(out_fd, select.POLLIN)
    while cap.marker and cap.started_at is None and not cap.bad_start and poller.poll(0):
        chunk = os.read(out_fd, max(1, len(cap.marker) - len(cap.prefix)))
        if not chunk or not cap.feed("out", chunk):
            return


class _Watcher:
    """Calls ``watch`` at most every ``every_s``, and never for more than ``1 / COST_SHARE`` of the time: a
    call that took ``t`` seconds waits ``COST_SHARE * t`` before the next. Why: a worker pumps every slot's run
    in one process; on a slow or loaded host (an emulated guest, 8 runs at once) a fixed 10 ms poll of each
    run's sockets starved the runs' own pumps until honest programs timed out. ``None`` as ``watch``: never."""

    COST_SHARE = 20

    def __init__(self, watch: Callable[[], SandboxStatus | None] | None, every_s: float, first_at: float) -> None:
        self._watch = watch
        self._every_s = every_s
        self.next_at = first_at if watch is not None else float("inf")

    def poll(self, now: float) -> SandboxStatus | None:
        if self._watch is None or now < self.next_at:
            return None
        verdict = self._watch()
        took = time.monotonic() - now
        self.next_at = now + max(self._every_s, took * self.COST_SHARE)
        return verdict


def _stop_while_running(
    now: float, deadline: float, obs: Observed, deadlines: Deadlines, watcher: _Watcher
) -> tuple[bool, SandboxStatus | None]:
    """Whether to stop a run that has not exited yet, and why (the watch's verdict, the clock)."""
    verdict = watcher.poll(now)
    if verdict is not None:
        return True, verdict
    if now >= deadline:
        timed_out = obs.started_at is not None or deadlines.timeout_before_start
        return True, SandboxStatus.TIMEOUT if timed_out else None
    return False, None


def pump(
    *,
    out_fd: int,
    err_fd: int,
    exit_fd: int,
    timeout_s: float,
    spawn_at: float,
    cap: Capture,
    deadlines: Deadlines,
    watch: Callable[[], SandboxStatus | None] | None = None,
    watch_every_s: float = 0.01,
    watch_first_s: float = 0.02,
) -> Observed:
    """Pump output with caps until the exit fd fires (and the output is drained or ``drain_s`` passed), the
    clock runs out, output overflows or ``watch`` (called ``watch_first_s`` after the spawn, then every
    ``watch_every_s`` while the run runs) returns a stop reason. ``ended_at`` is when the exit fd fired (else
    when the pump stopped); ``started_at`` is when the start marker arrived, if the loop got to see it."""
    obs = Observed()
    sel = selectors.DefaultSelector()
    try:
        sel.register(out_fd, selectors.EVENT_READ, "out")
        sel.register(err_fd, selectors.EVENT_READ, "err")
        sel.register(exit_fd, selectors.EVENT_READ, "exit")
        deadline = spawn_at + timeout_s + deadlines.setup_s
        drain_until: float | None = None
        watcher = _Watcher(watch, watch_every_s, spawn_at + watch_first_s)
        while sel.get_map():
            now = time.monotonic()
            if drain_until is None:
                stop, obs.stopped_for = _stop_while_running(now, deadline, obs, deadlines, watcher)
                if stop:
                    return obs
            elif now >= drain_until:
                return obs
            wake = drain_until or min(deadline, watcher.next_at)
            for key, _ in sel.select(max(0.0, wake - now)):
                fd, which = int(key.fd), str(key.data)
                if which == "exit":
                    obs.ended_at = time.monotonic()
                    obs.exited = True
                    sel.unregister(fd)
                    drain_until = obs.ended_at + deadlines.drain_s
                    continue
                chunk = os.read(fd, _READ_CHUNK)
                if not chunk:
                    sel.unregister(fd)
                    continue
                within = cap.feed(which, chunk)
                if not within and which == "err":
                    _take_waiting_marker(out_fd, cap)
                if obs.started_at is None and cap.started_at is not None:
                    # The clock starts with the program, not the sandbox. Taken before an overflow returns:
                    # the marker and the program's first flood can come in one read.
                    obs.started_at = cap.started_at
                    deadline = obs.started_at + timeout_s
                if not within:
                    obs.stopped_for = None if cap.bad_start else SandboxStatus.OUTPUT_LIMIT
                    return obs
        return obs
    finally:
        sel.close()
        if obs.ended_at is None:
            obs.ended_at = time.monotonic()
